"""Pilot tests: every console action driven by its key, against a real project in a temp
folder and fake telemetry."""

from __future__ import annotations

import os
import time

from textual.command import CommandList, CommandPalette
from textual.widgets import Input, SelectionList
from ui_harness import Notices, answered, make_app, nothing_started, select, showing, state_of, wait_for, workers_of

from console.ui.components.checks.checks_view import ChecksView
from console.ui.components.logs.log_view import LogView
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.confirm_dialog import ConfirmDialog
from console.ui.screens.help_screen import HelpScreen
from console.ui.screens.journal_screen import JournalScreen
from console.ui.screens.log_screen import LogScreen


def _checks_text(app) -> str:  # type: ignore[no-untyped-def]
    view = app.main_screen().query_one(ChecksView)
    return str(view.query_one("#checks-body").render())


async def test_run_shows_log_then_done_with_bell(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    bells = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    toasts: list[str] = []  # as posted: a toast can expire while a loaded machine catches up
    real_notify = app.notify

    def notify(message, *args, **kwargs):  # type: ignore[no-untyped-def]
        toasts.append(str(message))
        return real_notify(message, *args, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "prep") == "done", what="prep done")
        log = app.main_screen().query_one("#log", LogView)
        await wait_for(pilot, lambda: "progress 100%" in log.lines, what="last log line")
        assert "prep line 39" in log.lines
        assert "progress 50%" not in log.lines  # the carriage-return rewrite replaced it
        assert ("prep", "done") in app.main_screen().follow.ended
        assert bells, "a phase that ends rings the terminal bell"
        await wait_for(pilot, lambda: any("prep done" in t for t in toasts), what="a 'prep done' toast")


async def test_j_k_move_between_phases(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main_screen()
        await wait_for(pilot, lambda: main.selected == "prep", what="first phase selected")
        await pilot.press("j")
        await wait_for(pilot, lambda: main.selected == "train")
        await pilot.press("down", "down")
        await wait_for(pilot, lambda: main.selected == "clean")
        await pilot.press("k")
        await wait_for(pilot, lambda: main.selected == "gated")


async def test_blocked_run_offers_override_with_reason(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "gated")
        await pilot.press("r")
        await wait_for(pilot, lambda: showing(app, BlockedDialog), what="blocked dialog")
        dialog = app.screen
        assert [r.name for r in dialog.failing] == ["input-present"]
        assert dialog.query_one(SelectionList).selected == ["input-present"]  # the only one, preselected
        await pilot.press("ctrl+o")
        assert "reason" in str(dialog.query_one("#blocked-error").render())  # no reason: refused
        dialog.query_one(Input).focus()
        await pilot.press(*"demo data only")
        await pilot.press("enter")
        await wait_for(pilot, lambda: state_of(app, "gated") == "done", what="gated ran with override")
        overrides = project.journal.read(phase="gated", events={"override"})
        assert overrides and overrides[-1]["reason"] == "demo data only"
        assert overrides[-1]["check"] == "input-present"


async def test_confirm_phase_needs_its_id_typed(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "clean")
        await pilot.press("r")
        await wait_for(pilot, lambda: showing(app, ConfirmDialog), what="confirm dialog")
        summary = str(app.screen.query_one("#confirm-summary").render())
        assert "work/old" in summary and "does not exist" in summary
        await pilot.press(*"cle", "enter")
        assert "type exactly 'clean'" in str(app.screen.query_one("#confirm-error").render())
        assert state_of(app, "clean") == "ready"
        await pilot.press(*"an", "enter")
        await wait_for(pilot, lambda: state_of(app, "clean") == "done", what="clean done")
        assert project.journal.read(phase="clean", events={"confirm"})


async def test_confirm_cancel_does_not_run(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    notices = Notices()
    async with app.run_test(size=(100, 30), message_hook=notices.hook) as pilot:
        await select(pilot, app, "clean")
        await pilot.press("r")
        await wait_for(pilot, lambda: showing(app, ConfirmDialog), what="confirm dialog")
        before = workers_of(app, "start")
        await pilot.press("escape")
        # The notice is posted by the answer's handler, before it would ask for a start.
        await wait_for(pilot, lambda: "clean not started" in notices.texts, what="the 'not started' notice")
        await nothing_started(pilot, app, "clean", before)
        assert state_of(app, "clean") == "ready"
        assert project.run_dir("clean") is None


async def test_stop_asks_then_stops(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "sleeper")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "running", what="sleeper running")
        await pilot.press("s")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="stop question")
        await pilot.press("n")
        await answered(pilot, app, AskDialog)
        assert not workers_of(app, "stop"), "'n' began a stop"
        assert project.status("sleeper").state == "running"
        assert not project.journal.read(phase="sleeper", events={"stop"})
        assert state_of(app, "sleeper") == "running"
        await pilot.press("s")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="stop question")
        await pilot.press("y")
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "stopped", timeout=20, what="stopped")


async def test_check_and_verify_show_results(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "gated")
        await pilot.press("c")
        await wait_for(pilot, lambda: "input-present" in _checks_text(app), what="check results")
        assert "missing-input" in _checks_text(app)  # the evidence: the path it looked for
        await wait_for(pilot, lambda: state_of(app, "gated") == "blocked", what="blocked after check")
        await select(pilot, app, "prep")
        await pilot.press("v")
        await wait_for(pilot, lambda: app.main_screen().memory.shown.get("prep", ("",))[0] == "verify",
                       what="verify results")
        assert "exists" in _checks_text(app)


async def test_log_screen_follow_pause_and_search(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "prep") == "done", what="prep done")
        await pilot.press("l")
        await wait_for(pilot, lambda: showing(app, LogScreen), what="log screen")
        view = app.screen.query_one(LogView)
        await wait_for(pilot, lambda: "prep line 39" in view.lines, what="log lines")
        assert view.follow
        await pilot.press("f")
        assert not view.follow
        await pilot.press("slash", *"line 7", "enter")
        assert view.search is not None and view.search.pattern
        top = int(view.scroll_offset.y)
        assert "line 7" in view.text_at(top)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, LogScreen), what="back")


async def test_journal_screen_lists_runs(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "prep") == "done", what="prep done")
        await pilot.press("J")
        await wait_for(pilot, lambda: showing(app, JournalScreen), what="journal screen")
        screen = app.screen
        await wait_for(pilot, lambda: any(r.get("event") == "run_ended" for r in screen.records), what="records")
        assert all(r.get("phase") == "prep" for r in screen.records)
        await pilot.press("a")
        assert screen.all
        await pilot.press("escape")


async def test_help_and_theme(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: showing(app, HelpScreen), what="help")
        await pilot.press("escape")
        before = app.theme
        await pilot.press("t")
        assert app.theme != before and app.theme in app.theme_names


async def test_palette_runs_a_phase_command(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "train")
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: showing(app, CommandPalette), what="command palette")
        await pilot.press(*"Check gated")

        def gated_highlighted() -> bool:
            found = app.screen.query(CommandList)
            if not found or found.first().highlighted is None:
                return False
            options = found.first()
            return "Check gated" in str(options.get_option_at_index(options.highlighted).prompt)

        await wait_for(pilot, gated_highlighted, what="'Check gated' highlighted in the palette")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "gated" in app.main_screen().memory.shown, what="checks of gated via palette")
        assert app.main_screen().selected == "gated"


async def test_quit_says_phases_keep_running_and_they_do(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "sleeper")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "running", what="running")
        await pilot.press("q")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="quit question")
        assert "keep running" in str(app.screen.query_one("#ask-text").render())
        await pilot.press("y")
    assert app.still_running == ["sleeper"]
    time.sleep(0.5)  # wait-ok: the phase must outlive the console; a slow machine only makes this pass more easily
    status = project.status("sleeper")
    assert status.state == "running" and status.pid
    os.kill(status.pid, 0)  # still alive after the console quit


async def test_quit_with_nothing_running_exits_at_once(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, what="the console to exit")
    assert app.return_value == 0


async def test_reattach_shows_running_phase_and_its_log(project) -> None:  # type: ignore[no-untyped-def]
    project.start("sleeper")
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "running", what="running on attach")
        await select(pilot, app, "sleeper")
        log = app.main_screen().query_one("#log", LogView)
        await wait_for(pilot, lambda: "sleeping" in log.lines, what="log of the attached run")
        assert app.main_screen().follow.ended == []  # attaching is not an ending


async def test_two_consoles_do_not_launch_a_phase_twice(project) -> None:  # type: ignore[no-untyped-def]
    from console.core.lifecycle.project import Project

    other = Project.load(project.config.path)
    first, second = make_app(project), make_app(other)
    notices = Notices()
    async with first.run_test(size=(100, 30)) as p1, \
            second.run_test(size=(100, 30), message_hook=notices.hook) as p2:
        await select(p1, first, "sleeper")
        await select(p2, second, "sleeper")
        await p1.press("r")
        await wait_for(p1, lambda: state_of(first, "sleeper") == "running", what="first started it")
        second.main_screen().start_phase("sleeper", {}, False)
        await wait_for(p2, lambda: any("already running" in text for text in notices.texts),
                       what="second refused")
    from console.core.runs.manager import list_runs

    assert len(list_runs(project.config.state_dir, "sleeper")) == 1


async def test_run_on_a_done_phase_asks_first(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "prep") == "done", what="prep done")
        runs_before = len(project.journal.read(phase="prep", events={"run_started"}))
        await pilot.press("r")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="run-again question")
        text = str(app.screen.query_one("#ask-text").render())
        assert "is done" in text and "train" in text  # names the phase that would go stale
        before = workers_of(app, "start")
        await pilot.press("n")
        await answered(pilot, app, AskDialog)
        await nothing_started(pilot, app, "prep", before)
        assert len(project.journal.read(phase="prep", events={"run_started"})) == runs_before
        await pilot.press("r")
        await wait_for(pilot, lambda: showing(app, AskDialog), what="run-again question")
        await pilot.press("y")
        await wait_for(pilot, lambda: len(project.journal.read(phase="prep", events={"run_started"})) > runs_before,
                       what="second run started")


async def test_keys_typed_ahead_act_on_the_phase_under_the_cursor(project) -> None:  # type: ignore[no-untyped-def]
    """`k` then `r` arriving in one burst (a slow SSH link): `r` asks about the phase the cursor
    moved to, though the list's highlight message has not reached the screen yet."""
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("r")
        await wait_for(pilot, lambda: state_of(app, "prep") == "done", what="prep done")
        await select(pilot, app, "train")
        main = app.main_screen()
        main.query_one("#phases").action_cursor_up()
        main.action_run()  # before the highlight message is handled, as in a burst of keys
        await wait_for(pilot, lambda: showing(app, AskDialog), what="the run-again question for prep")
        assert "prep" in str(app.screen.query_one("#ask-text").render())
        assert project.journal.read(phase="train", events={"run_started"}) == []
        await pilot.press("n")


async def test_started_phase_shows_the_checks_it_passed(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        assert "needs-done" not in _checks_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: "needs-done" in _checks_text(app), what="pre-flight results shown")


async def test_ready_phases_are_preflighted_without_a_key(project) -> None:  # type: ignore[no-untyped-def]
    from ui_harness import FAST

    from console.ui.screens.main.reads import Intervals

    iv = Intervals(**{**vars(FAST), "preflight": 60.0})
    app = make_app(project, intervals=iv)
    checks_before = len(project.journal.read(events={"checks"}))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: state_of(app, "gated") == "blocked", what="gated blocked by its checks")
        assert "input-present" in app.main_screen().follow.by_id["gated"].reason
        await select(pilot, app, "gated")
        assert "input-present" in _checks_text(app)
    assert len(project.journal.read(events={"checks"})) == checks_before  # not a decision: not journaled


SLOW_START = """
  - id: slowstart
    title: Start behind a slow pre-flight
    run: [python3, -c, "import time\\nprint('slow started', flush=True)\\ntime.sleep(60)"]  # wait-ok: the phase's own work
    checks:
      - command: [python3, -c, "import os, time\\nd = time.monotonic() + 60\\nwhile not os.path.exists('{go}') and time.monotonic() < d: time.sleep(0.05)"]  # wait-ok: the check polls for its go file, under a deadline
        name: slow-check
"""


async def test_quit_during_a_starts_preflight_asks_and_the_phase_still_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The start's checks take seconds; q then asks (phases keep running), the row says
    starting meanwhile, and after y the start lands and the phase runs on without a console."""
    from ui_harness import CONFIG, stop_all, write_config

    from console.core.lifecycle.project import Project
    from console.ui.components.phases.phase_list import PhaseList

    go = tmp_path / "preflight.go"
    project = Project.load(write_config(tmp_path, CONFIG + SLOW_START.replace("{go}", str(go))))
    try:
        app = make_app(project)
        async with app.run_test(size=(100, 30)) as pilot:
            await select(pilot, app, "slowstart")
            await pilot.press("r")
            plist = app.main_screen().query_one(PhaseList)
            await wait_for(pilot, lambda: any(r.id == "slowstart" and r.starting for r in plist.rows), what="the start in flight")
            row = plist.get_option_at_index(plist.get_option_index("slowstart")).prompt
            assert "start…" in str(row) and "✓" not in str(row)
            await pilot.press("q")
            await wait_for(pilot, lambda: showing(app, AskDialog), what="quit question")
            text = str(app.screen.query_one("#ask-text").render())
            assert "slowstart" in text and "keep" in text
            await pilot.press("y")
            assert app.return_value is None  # waits for the start to land
            go.touch()
            await wait_for(pilot, lambda: app.return_value is not None, timeout=60, what="the console to quit")
        assert app.still_running == ["slowstart"]
        status = project.status("slowstart")
        assert status.state == "running" and status.pid
    finally:
        go.touch()
        stop_all(project)
