"""The console's second pass, as an operator meets it: 80x24 first (failing checks first,
ids shown, toasts clear of the log and of dialog buttons, human times, q in the footer,
the log's path and follow state), dialogs that scroll, re-attach with context, a stop that
cannot hit a restarted run, GPU ownership through the screen, run history, and stalls."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.widgets import Button, Footer
from ui_harness import FAST, Notices, make_app, select, showing, state_of, stop_all, wait_for, write_config

from console.core.checks.result import CheckResult
from console.core.lifecycle.project import Project
from console.core.telemetry.fake import FakeGpuSource
from console.ui.components.checks.checks_view import ChecksView, render_results
from console.ui.components.logs.journal_view import render_records
from console.ui.components.logs.log_view import LogView
from console.ui.components.machine.gpu_panel import GpuPanel, owner_of
from console.ui.components.phases.phase_list import PhaseList
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.history_screen import HistoryScreen
from console.ui.screens.log_screen import LogScreen


def _result(name: str, status: str, **kw) -> CheckResult:  # type: ignore[no-untyped-def]
    return CheckResult(name, "exists", kw.pop("severity", "error"), status, kw.pop("message", f"{name} {status}"),
                       kw.pop("evidence", {}))


def _text(widget) -> str:  # type: ignore[no-untyped-def]
    return str(widget.render())


def _rows(plist: PhaseList) -> list[str]:
    """The phase list's rows as the operator reads them."""
    return [str(plist.get_option_at_index(i).prompt) for i in range(plist.option_count)]


def test_failing_checks_come_first_and_passing_ones_fold_into_one_line() -> None:
    results = [_result(f"ok-{i}", "pass") for i in range(5)] + [_result("disk", "fail"), _result("shm", "warn")]
    folded = render_results(results, collapse_passing=True).plain.splitlines()
    assert folded[0].startswith("✗ disk") and folded[1].startswith("! shm")
    assert folded[2].startswith("✓ 5 passed") and len(folded) == 3
    unfolded = render_results(results).plain
    assert unfolded.index("disk") < unfolded.index("ok-0")


def test_times_are_human_in_the_journal_and_in_evidence() -> None:
    import time

    t = time.mktime((2026, 11, 30, 8, 21, 0, 0, 0, -1))
    assert render_records([{"t": t, "event": "stop", "phase": "x"}]).plain.startswith("2026-11-30 08:21")
    text = render_results([_result("fresh", "fail", evidence={"finished_at": t})]).plain
    assert "finished_at: 2026-11-30 08:21:00" in text


async def test_80x24_ids_marker_footer_quit_log_path_and_toasts_clear_of_the_log(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await select(pilot, app, "prep")
        main = app.main_screen()
        rows = _rows(main.query_one(PhaseList))
        assert [r.split()[1] for r in rows] == ["prep", "train", "gated", "clean", "sleeper", "stream"]
        assert rows[0].startswith("›") and not rows[1].startswith("›")
        footer = main.query_one(Footer)

        def quit_key():  # type: ignore[no-untyped-def]
            return next((k for k in footer.query("FooterKey") if k.key == "q" and k.region.width), None)

        await wait_for(pilot, quit_key, what="the footer's keys")
        assert quit_key().region.right <= 80 and quit_key().description == "Quit"
        await pilot.press("r")
        log = main.query_one("#log", LogView)
        await wait_for(pilot, lambda: state_of(app, "prep") == "done" and "progress 100%" in log.lines, what="done")
        assert "following" in log.border_title and "output.log" in log.border_title
        for i in range(4):
            app.notify(f"toast number {i} with a long enough text to wrap over two lines of a toast", timeout=30)
        await wait_for(pilot, lambda: len(app.screen.query("Toast")) >= 4, what="toasts shown")
        await pilot.pause()
        rack = app.screen.query_one("ToastRack").region  # toasts beyond it scroll, unseen
        for toast in app.screen.query("Toast"):
            seen = toast.region.intersection(rack)
            assert not seen.overlaps(log.region), "a toast covers the log"
            assert not seen.overlaps(main.query_one("#stats").region), "a toast covers the progress line"
        log.focus()
        await pilot.press("up")
        assert "paused" in log.border_title


async def test_blocked_dialog_scrolls_so_its_reason_and_buttons_stay_reachable(project) -> None:  # type: ignore[no-untyped-def]
    long = {"path": "/very/long/" + "x" * 150, "nearest_existing": "/", "detail": "y" * 150}
    results = [_result(f"check-{i}", "fail", evidence=long, message="a long message " * 8) for i in range(3)]
    app = make_app(project)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.push_screen(BlockedDialog("gated", results))
        await wait_for(pilot, lambda: showing(app, BlockedDialog), what="dialog")
        app.notify("a toast while the dialog is open", timeout=30)
        await wait_for(pilot, lambda: app.screen.query("Toast"), what="toast")
        await pilot.pause()
        dialog = app.screen
        for widget in [*dialog.query(Button), dialog.query_one("#blocked-reason")]:
            r = widget.region
            assert r.height > 0 and r.y >= 0 and r.bottom <= 24, f"{widget} is off screen: {r}"
            rack = dialog.query_one("ToastRack").region
            for toast in dialog.query("Toast"):
                assert not toast.region.intersection(rack).overlaps(r), "a toast covers a dialog control"
        assert dialog.query_one("#dialog-scroll").max_scroll_y > 0  # the evidence scrolls instead


def test_needs_done_is_not_offered_while_the_upstream_phase_runs() -> None:
    needs = CheckResult("needs-done", "needs", "error", "fail", "not done yet: prep is running",
                        {"needs": ["prep"], "missing": {"prep": "running"}})
    dialog = BlockedDialog("train", [needs, _result("input", "fail")])
    assert [r.name for r in dialog.offered] == ["input"]
    assert dialog.locked == {"needs-done": ["prep"]}
    waiting = CheckResult("needs-done", "needs", "error", "fail", "not done yet: prep is failed",
                          {"needs": ["prep"], "missing": {"prep": "failed"}})
    assert [r.name for r in BlockedDialog("train", [waiting]).offered] == ["needs-done"]


async def test_reattach_selects_the_running_phase_with_its_checks_and_log(project) -> None:  # type: ignore[no-untyped-def]
    project.start("stream")
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main_screen()
        log = main.query_one("#log", LogView)
        await wait_for(pilot, lambda: main.selected == "stream", what="running phase selected on open")
        await wait_for(pilot, lambda: "stream line 30 wrote rows_0/3000.safetensors" in log.lines, what="its log")
        checks = str(main.query_one(ChecksView).query_one("#checks-body").render())
        assert "needs-done" in checks and "not run yet" not in checks  # what its start passed
    (Path(project.config.root) / "stream.stop").touch()


async def test_reattach_without_a_running_phase_selects_the_first_not_done(project) -> None:  # type: ignore[no-untyped-def]
    project.start("prep")
    await_done(project, "prep")
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.main_screen().selected == "train", what="first phase not done")


def await_done(project: Project, phase_id: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while project.status(phase_id).state != "done":
        assert time.monotonic() < deadline, f"{phase_id} did not finish"
        time.sleep(0.05)  # wait-ok: polling a condition with a deadline


async def test_stop_dialog_never_stops_a_run_that_replaced_the_one_it_asked_about(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    notices = Notices()
    async with app.run_test(size=(100, 30), message_hook=notices.hook) as pilot:
        await select(pilot, app, "sleeper")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "running", what="sleeper running")
        first = project.run_dir("sleeper").run_id
        await pilot.press("s")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="stop question")
        assert first in str(app.screen.query_one("#ask-text").render())  # the question names the run
        project.stop("sleeper", grace=2)  # meanwhile, someone restarts it from a shell
        second = project.start("sleeper").run_id
        assert second != first
        await pilot.press("y")
        await wait_for(pilot, lambda: any("restarted while you were asked" in text for text in notices.texts),
                       what="refusal")
        await wait_for(pilot, lambda: all(w.is_finished for w in app.workers if w.group == "stop"), what="stop done")
        assert project.status("sleeper").state == "running" and project.run_dir("sleeper").run_id == second


class _GpuWithPids:
    """Fake GPUs whose processes are whatever pids the test sets (the phase's, once known)."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def read(self, t: float | None = None):  # type: ignore[no-untyped-def]
        return FakeGpuSource(n=2, processes={0: self.pids}).read(t=t)


DAEMON_CONFIG = """\
name: own
state_dir: ./state
phases:
  - id: trainer
    title: Train with a daemonised worker
    run: [python3, -c, "%s"]
"""
# The phase double-forks a worker (parent gone, still in the phase's session), prints its
# pid, and waits: the GPU process a multi-process launcher leaves behind.
DAEMON = ("import os, sys, time\\nr, w = os.pipe()\\nif os.fork() == 0:\\n    if os.fork() == 0:\\n"
          "        os.write(w, str(os.getpid()).encode()); time.sleep(60); os._exit(0)\\n    os._exit(0)\\n"  # wait-ok: the phase program's own work, not a test pause
          "os.wait()\\nprint('worker', os.read(r, 32).decode(), flush=True)\\ntime.sleep(60)")  # wait-ok: the phase program's own work, not a test pause


async def test_gpu_processes_of_a_phase_are_named_through_the_screen(tmp_path: Path) -> None:
    cfg = tmp_path / "own.yaml"
    cfg.write_text(DAEMON_CONFIG % DAEMON)
    project = Project.load(cfg)
    gpu = _GpuWithPids()
    app = make_app(project, gpu=gpu)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await select(pilot, app, "trainer")
            await pilot.press("r")
            log = app.main_screen().query_one("#log", LogView)
            await wait_for(pilot, lambda: any(ln.startswith("worker ") for ln in log.lines), what="worker pid")
            worker = int(next(ln for ln in log.lines if ln.startswith("worker ")).split()[1])
            gpu.pids = [worker]
            panel = app.main_screen().query_one(GpuPanel)
            await wait_for(pilot, lambda: panel.view is not None and panel.view.owners.get(worker) == "trainer",
                           what="worker owned by trainer")
            assert owner_of(panel.view.reading.gpus[0], panel.view.owners) == "trainer"
    finally:
        stop_all(project)


async def test_history_lists_runs_with_who_and_overrides_and_opens_a_log(project) -> None:  # type: ignore[no-untyped-def]
    project.start("gated", overrides={"input-present": "demo data only"})
    await_done(project, "gated")
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "gated")
        await pilot.press("h")
        await wait_for(pilot, lambda: showing(app, HistoryScreen) and app.screen.rows, what="history")
        row = app.screen.rows[0]
        assert row.state == "succeeded" and row.exit_code == 0 and row.user not in ("", "?")
        assert row.overrides == ("input-present: demo data only",)
        text = app.screen.query_one("#history-list").get_option_at_index(0).prompt.plain
        assert "overridden: input-present: demo data only" in text and row.run_id in text
        await pilot.press("enter")
        await wait_for(pilot, lambda: showing(app, LogScreen), what="log of that run")
        view = app.screen.query_one(LogView)
        await wait_for(pilot, lambda: "gated ran" in view.lines, what="its lines")


STALL_CONFIG = """\
name: stall
state_dir: ./state
notify:
  - run: [%s, -c, "import os, sys; open(sys.argv[1], 'a').write(os.environ['EAGLE3_NOTIFY_EVENT'] + ' ' + sys.argv[2] + ' ' + os.environ['EAGLE3_SUMMARY'] + chr(10))", alerts.txt, "{phase}"]
    on: [stalled, failed]
    timeout: 10s
phases:
  - id: quiet
    title: Goes silent
    stall_after: 1s
    run: [python3, -c, "import time, sys\\nprint('working', flush=True)\\ntime.sleep(60)"]  # wait-ok: the phase program's own work, not a test pause
"""


async def test_a_phase_that_goes_silent_is_flagged_rung_journaled_and_notified(tmp_path: Path) -> None:
    cfg = tmp_path / "stall.yaml"
    cfg.write_text(STALL_CONFIG % sys.executable)
    project = Project.load(cfg)
    app = make_app(project, intervals=FAST)
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    alerts = tmp_path / "alerts.txt"
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await select(pilot, app, "quiet")
            await pilot.press("r")
            main = app.main_screen()
            await wait_for(pilot, lambda: "quiet" in main.follow.stalled, timeout=30, what="stall flagged")
            assert "⚠ stalled" in _rows(main.query_one(PhaseList))[0]
            assert "⚠ stalled" in _text(main.query_one("#detail-header"))
            assert bells
            await wait_for(pilot, lambda: alerts.exists() and alerts.read_text(), timeout=30, what="notifier ran")
            assert alerts.read_text().startswith("stalled quiet quiet stalled: no progress event and no log line")
            stalled = project.journal.read(events={"stalled"})
            assert len(stalled) == 1 and stalled[0]["phase"] == "quiet"
    finally:
        stop_all(project)


async def test_palette_lists_each_command_once_and_a_confirmed_start_journals_checks_once(project) -> None:  # type: ignore[no-untyped-def]
    from console.ui.screens.confirm_dialog import ConfirmDialog

    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "clean")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles.count("Run clean") == 1 and titles.count("Run prep") == 1
        await pilot.press("r")
        await wait_for(pilot, lambda: showing(app, ConfirmDialog), what="confirm dialog")
        await pilot.press(*"clean", "enter")
        await wait_for(pilot, lambda: state_of(app, "clean") == "done", what="clean done")
    assert len(project.journal.read(phase="clean", events={"checks"})) == 1


async def test_disk_line_is_what_df_says_and_full_in_fits_at_80_columns() -> None:
    """28 GB used, 79 GB available to us on a 271 GB disk (the rest reserved or another
    tenant's): the bar is 28/107, the figure 79G free; `full in` survives an 80-column screen."""
    from textual.app import App, ComposeResult

    from console.core.telemetry.history import DiskForecast
    from console.core.telemetry.samples import DiskReading, VolumeSample
    from console.ui.components.machine.disk_panel import DiskPanel

    G = 10**9

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield DiskPanel()

    fc = DiskForecast()
    for k in range(10):
        fc.update(DiskReading(t=2.0 * k, volumes=(VolumeSample("/data/eagle3/work", 271 * G, 28 * G + k * 40 * 10**6,
                                                               79 * G - k * 40 * 10**6),)))
    reading = DiskReading(t=18.0, volumes=(VolumeSample("/data/eagle3/work", 271 * G, 28 * G, 79 * G),))
    from console.ui.render import bar

    for width, expect in ((36, "79G free full in"), (100, "79G free of 107G +20M/s  full in")):
        app = Host()
        async with app.run_test(size=(width, 5)) as pilot:
            panel = app.query_one(DiskPanel)
            panel.show(reading, {f.path: f for f in fc.forecasts()}, {})
            await pilot.pause()
            text = panel.render().plain
            assert expect in text, text
            cells = 4 if width < 70 else 10
            assert bar(28 / 107, cells).plain in text and bar(28 / 271, cells).plain not in text


async def test_the_phases_title_shows_the_overrides_eagle3_set_saved(tmp_path) -> None:
    from console.core.config.overlay import write_saved

    cfg = write_config(tmp_path)
    write_saved(cfg, {"workdir": "./work"})
    project = Project.load(cfg)
    app = make_app(project)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            main = app.main_screen()
            phases = main.query_one(PhaseList)
            await wait_for(pilot, lambda: phases.border_title, what="the phases title")
            assert "phases · uitest · set workdir=./work" in phases.border_title
    finally:
        stop_all(project)
