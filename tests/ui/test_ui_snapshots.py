"""SVG snapshots of the main screen at 80x24 and 160x48 while a phase runs: 8 fake GPUs
(one failing its NVML queries, two busy with the running phase) with a 60-second history,
fake volumes with a write-rate forecast, a phase reporting progress events with fixed
times, and a frozen clock, so every run renders the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_harness import CONFIG, FROZEN, T0, AtTime, finish, make_app, stop_all, wait_for, write_config

from console.core.lifecycle.project import Project
from console.core.telemetry.fake import FakeDiskSource, FakeGpuSource
from console.core.telemetry.history import DiskForecast
from console.ui.components.logs.journal_view import JournalView
from console.ui.components.logs.log_view import LogView
from console.ui.components.machine.disk_panel import DiskPanel
from console.ui.components.machine.gpu_panel import GpuPanel
from console.ui.messages import LogLines

LOG_PATH = "/data/eagle3/state/runs/stream/20260101-000000-abcd/output.log"


@pytest.fixture
def snap_project(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    import time

    monkeypatch.setenv("TZ", "UTC")  # times on screen are local: pin the zone
    time.tzset()
    project = Project.load(write_config(tmp_path))
    yield project
    (tmp_path / "stream.stop").touch()
    stop_all(project)
    monkeypatch.undo()
    time.tzset()


def _app(project: Project, gpu=None):  # type: ignore[no-untyped-def]
    return make_app(project, intervals=FROZEN, clock=lambda: T0 + 3600, gpu=gpu)


async def _quiet(pilot) -> None:  # type: ignore[no-untyped-def]
    """Stop every poller and let what they posted land: nothing changes the screen after."""
    main = pilot.app.main_screen()
    for poller in main.pollers.values():
        poller.stop(wait=10)
    status = main.pollers["status"]
    await wait_for(pilot, lambda: main.follow.looks == status.posted, what="the last snapshot handled")
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await _laid_out(pilot)


async def _laid_out(pilot) -> None:  # type: ignore[no-untyped-def]
    """The last data is in the layout: every phase row and every volume line has its place."""
    from console.ui.components.phases.phase_list import PhaseList

    main = pilot.app.main_screen()
    plist, disk = main.query_one(PhaseList), main.query_one(DiskPanel)
    await wait_for(pilot, lambda: plist.region.height >= min(len(main.follow.statuses), plist.styles.max_height.value
                                                            if plist.styles.max_height else 99)
                   and (disk.view is None or disk.region.height >= len(disk.view.reading.volumes)),
                   what="the layout to take the last data")


async def _reselect(pilot, phase_id: str) -> None:  # type: ignore[no-untyped-def]
    """Select another phase and `phase_id` again, as an operator would: its detail redrawn."""
    main = pilot.app.main_screen()
    plist = main.query_one("#phases")
    other = next(s.phase.id for s in main.follow.statuses if s.phase.id != phase_id)
    for pick in (other, phase_id):
        plist.select_id(pick)
        await wait_for(pilot, lambda p=pick: main.selected == p, what=f"{pick} selected")


async def _settle(pilot, run: bool = True) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    main = app.main_screen()
    await wait_for(pilot, lambda: main.follow.statuses and main.query_one(GpuPanel).view is not None
                   and main.query_one(DiskPanel).view is not None, what="first reads")
    if not run:
        await _quiet(pilot)
    else:
        main.query_one("#phases").select_id("stream")
        await wait_for(pilot, lambda: main.selected == "stream", what="stream selected")
        main.project.start("stream")
        log = main.query_one("#log", LogView)

        def running() -> bool:
            main.pollers["status"].poke()
            main.pollers["log"].poke()
            snap = main.follow.stats.get("stream")
            return (main.follow.by_id["stream"].state == "running" and snap is not None and snap.done == 3000
                    and log.last_line == "stream: waiting for stream.stop")

        await wait_for(pilot, running, timeout=30, what="stream running with its events and log")
        await _quiet(pilot)
        await wait_for(pilot, lambda: log.settled, what="the log's last lines drawn")
        log.set_source(LOG_PATH)
        main.follow.by_id["stream"].started_at = T0 + 3000  # the header names when it started: pin it
        main.query_one("#phases").show(main.follow.statuses, main.follow.stalled, main.flow.starting)  # and the row
        await _reselect(pilot, "stream")
        main.query_one("#journal", JournalView).show(
            [{"t": T0 + 3000, "event": "run_started", "phase": "stream", "run_id": "20260101-000000-abcd",
              "user": "ops"}], show_phase=False)
    app.clear_notifications()
    gpu = FakeGpuSource(n=8, failing=(3,))
    panel = main.query_one(GpuPanel)
    owners = {4242: "stream"} if run else {}
    busy = FakeGpuSource(n=8, failing=(3,), processes={0: [4242], 1: [4242]} if run else None)
    for k in range(1, 61):
        panel.show((busy if k == 60 else gpu).read(t=T0 + k), owners)
    disk = FakeDiskSource(volumes=("/data", "/scratch"))
    forecast = DiskForecast()
    for k in range(0, 11):
        forecast.update(disk.read(t=T0 + 2 * k))
    reading = disk.read(t=T0 + 20)
    forecast.update(reading)
    main.query_one(DiskPanel).show(reading, {f.path: f for f in forecast.forecasts()}, {})
    await pilot.pause()
    await _laid_out(pilot)
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen(snap_compare, snap_project, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_app(snap_project), terminal_size=size, run_before=_settle)


def test_no_driver_is_one_line(snap_compare, snap_project) -> None:  # type: ignore[no-untyped-def]
    gpu = FakeGpuSource(error="NVIDIA driver not found (libnvidia-ml.so.1): no such file")

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        main = pilot.app.main_screen()
        await wait_for(pilot, lambda: main.follow.statuses and main.query_one(GpuPanel).view is not None)
        await _quiet(pilot)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project, gpu=gpu), terminal_size=(80, 24), run_before=settle)


def test_blocked_dialog(snap_compare, snap_project) -> None:  # type: ignore[no-untyped-def]
    from console.ui.screens.blocked_dialog import BlockedDialog

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        pilot.app.main_screen().query_one("#phases").select_id("gated")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, BlockedDialog), what="dialog")
        main = pilot.app.main_screen()
        await wait_for(pilot, lambda: not main.flow.starting, what="the start's outcome handled")
        await _laid_out(pilot)
        pilot.app.clear_notifications()
        # The main screen under the dialog keeps its "starting…" toast until it expires (3 s):
        # wait for that, or a loaded machine (slower than 3 s here) draws another screen.
        await wait_for(pilot, lambda: not any(s.query("Toast") for s in pilot.app.screen_stack), what="no toast left")
        await pilot.pause()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=(80, 24), run_before=settle)


SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])


@SIZES
def test_failing_checks(snap_compare, snap_project, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    """A phase whose pre-flight fails: the failing check first, with its evidence, each row
    cut at a word (never inside the check's name), the passing ones folded."""

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        main = pilot.app.main_screen()
        main.query_one("#phases").select_id("gated")
        await wait_for(pilot, lambda: main.selected == "gated", what="gated selected")
        results = main.project.check("gated", journal=False)
        main.remember_checks("gated", "check", results)
        pilot.app.clear_notifications()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=size, run_before=settle)


@SIZES
def test_log_screen_while_a_phase_runs(snap_compare, snap_project, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    """`l` on the running phase: the header names the phase, says following and gives the
    file's path (cut from the left), over the log's last lines."""
    from console.ui.screens.log_screen import LogScreen

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot)
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, LogScreen), what="the log screen")
        screen = pilot.app.screen
        view = screen.query_one(LogView)
        await wait_for(pilot, lambda: view.last_line == "stream: waiting for stream.stop", what="its lines")
        screen.poller.stop(wait=10)
        await wait_for(pilot, lambda: view.settled, what="the last frame")
        kept = [ln for ln in view.lines if not ln.startswith("[eagle3 ")]  # the launcher's line: times, paths
        screen.post_message(LogLines("pinned", kept, "", reset=True, path=LOG_PATH))
        await wait_for(pilot, lambda: view.lines == kept and view.settled and screen.path == LOG_PATH,
                       what="the pinned lines and path drawn")
        pilot.app.clear_notifications()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=size, run_before=settle)


@SIZES
def test_help_wraps_with_a_hanging_indent(snap_compare, snap_project, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    from console.ui.screens.help_screen import HelpScreen

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), what="help")
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=size, run_before=settle)


def test_train_blocked_dialog_opens_at_its_header(snap_compare, snap_project) -> None:  # type: ignore[no-untyped-def]
    """A fresh pipeline's train: three failing checks, a command's argv in the evidence;
    the dialog opens at "3 check(s) fail", not scrolled to the argv."""
    from test_ui_newcomer_80x24 import train_blocked

    from console.ui.screens.blocked_dialog import BlockedDialog

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        pilot.app.push_screen(BlockedDialog("train", train_blocked()))
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, BlockedDialog) and pilot.app.screen.is_mounted,
                       what="dialog")
        pilot.app.clear_notifications()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=(80, 24), run_before=settle)


def test_a_toast_on_the_log_screen_leaves_its_header(snap_compare, snap_project) -> None:  # type: ignore[no-untyped-def]
    from console.ui.screens.log_screen import LogScreen

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        pilot.app.push_screen(LogScreen("prep", lambda: None, interval=3600))
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, LogScreen) and pilot.app.screen.is_mounted,
                       what="the log screen")
        screen = pilot.app.screen
        screen.poller.stop(wait=10)
        screen.post_message(LogLines("pinned", [f"prep line {i}" for i in range(40)], "", reset=True,
                                     path=LOG_PATH))
        view = screen.query_one(LogView)
        await wait_for(pilot, lambda: len(view.lines) == 40 and view.settled, what="the lines drawn")
        pilot.app.clear_notifications()
        pilot.app.notify("prep done", title="phase ended", timeout=600)
        await wait_for(pilot, lambda: screen.query("Toast"), what="the toast")
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=(80, 24), run_before=settle)


def test_the_phases_title_names_the_target_in_effect(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from test_ui_newcomer_80x24 import TARGET

    from console.core.config.overlay import write_saved

    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace("  workdir: ./work\n", "  workdir: ./work\n  target: ./models/base\n"))
    write_saved(cfg, {"target": TARGET})
    project = Project.load(cfg)

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        pilot.app.clear_notifications()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    try:
        assert snap_compare(_app(project), terminal_size=(80, 24), run_before=settle)
    finally:
        stop_all(project)


def test_the_detail_log_wraps_a_long_line(snap_compare, snap_project) -> None:  # type: ignore[no-untyped-def]
    """A skip summary longer than the pane at 80x24: on rows of its own, indented, whole."""
    from test_ui_newcomer_80x24 import SKIP_SUMMARY

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot, run=False)
        main = pilot.app.main_screen()
        main.query_one("#phases").select_id("prep")
        await wait_for(pilot, lambda: main.selected == "prep", what="prep selected")
        view = main.query_one("#log", LogView)
        main.post_message(LogLines("pinned", ["regenerate: done", SKIP_SUMMARY], "", reset=True, path=LOG_PATH))
        await wait_for(pilot, lambda: view.last_line == SKIP_SUMMARY and view.settled, what="the lines drawn")
        pilot.app.clear_notifications()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(_app(snap_project), terminal_size=(80, 24), run_before=settle)


# prep, a stand-in stage that warns twice through pipeline.events.warn, as the stages do.
WARNING_PREP = """\
from pipeline.events import warn
print("prep: reading 3 sources", flush=True)
warn("prep", "skipped 3 records with no assistant turn")
warn("prep", "source chitchat has 12 duplicate ids; the first of each is kept, the rest are dropped")
print("prep: wrote 997 records", flush=True)
"""


def test_a_stage_warning_shows_on_its_phase_row_and_in_its_log(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A stage that warned twice: `⚠2` on its row beside the duration (the title cut at a word
    to make room), the warnings counted in its stats, and its warning lines marked in its log."""
    prep_run = next(ln for ln in CONFIG.splitlines(keepends=True) if ln.startswith("    run:"))
    (tmp_path / "warning_prep.py").write_text(WARNING_PREP)
    project = Project.load(write_config(tmp_path, CONFIG.replace(prep_run, "    run: [python, warning_prep.py]\n", 1)))
    finish(project, "prep")

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        main = pilot.app.main_screen()
        await wait_for(pilot, lambda: main.follow.warnings.get("prep") == 2, what="prep's two warnings")
        await _settle(pilot, run=False)
        prep = main.follow.by_id["prep"]
        prep.started_at, prep.ended_at = T0 + 3000, T0 + 3192  # the row and the header say how long: pin it
        main.query_one("#phases").show(main.follow.statuses, main.follow.stalled, main.flow.starting,
                                       main.follow.warnings)
        await _reselect(pilot, "prep")
        view = main.query_one("#log", LogView)
        logged = Path(main.follow.log_path("prep") or "").read_text().splitlines()
        kept = [ln for ln in logged if not ln.startswith("[eagle3 ")]  # the launcher's line: times, paths
        assert kept[-1] == "prep: wrote 997 records"
        main.post_message(LogLines("pinned", kept, "", reset=True, path=LOG_PATH))
        await wait_for(pilot, lambda: view.lines == kept and view.settled, what="the pinned lines drawn")
        pilot.app.clear_notifications()
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    import time

    monkeypatch.setenv("TZ", "UTC")  # times on screen are local: pin the zone
    time.tzset()
    try:
        assert snap_compare(_app(project), terminal_size=(80, 24), run_before=settle)
    finally:
        stop_all(project)
        monkeypatch.undo()
        time.tzset()


__all__ = ["AtTime"]
