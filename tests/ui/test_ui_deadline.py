"""The console on several live phases and a deadline: every live phase and the time left show
above the detail, `n` moves the detail (its log) from one live phase to the next, `d` sets the
deadline the runs' launchers keep (the phases are stopped at it and read so) or clears it."""

from __future__ import annotations

from ui_harness import answered, make_app, showing, state_of, wait_for

from console.ui.components.detail.live_bar import LiveBar
from console.ui.components.logs.log_view import LogView
from console.ui.screens.deadline_dialog import DeadlineDialog


def _bar(app) -> str:  # type: ignore[no-untyped-def]
    bar = app.main_screen().query_one(LiveBar)
    return str(bar.render()) if bar.display else ""


async def test_live_phases_show_together_and_n_moves_the_log_between_them(project) -> None:  # type: ignore[no-untyped-def]
    project.start("sleeper")
    project.start("stream")
    app = make_app(project)
    async with app.run_test(size=(120, 36)) as pilot:
        main = app.main_screen()
        await wait_for(pilot, lambda: "sleeper" in _bar(app) and "stream" in _bar(app), what="both live in the bar")
        log = main.query_one("#log", LogView)
        seen = set()
        for _ in range(3):
            await pilot.press("n")
            await wait_for(pilot, lambda: main.selected in ("sleeper", "stream"), what="a live phase selected")
            phase = main.selected
            want = "sleeping" if phase == "sleeper" else "stream line 01 wrote rows_0/100.safetensors"
            await wait_for(pilot, lambda want=want: want in log.lines, what=f"{phase}'s log in the pane")
            seen.add(phase)
        assert seen == {"sleeper", "stream"}
        assert main.selected != "prep"


async def test_d_sets_a_deadline_the_runs_are_stopped_at_and_clears_one(project) -> None:  # type: ignore[no-untyped-def]
    project.start("sleeper")
    app = make_app(project)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "running", what="sleeper running")
        await pilot.press("d")
        await wait_for(pilot, lambda: showing(app, DeadlineDialog), what="the deadline dialog")
        await pilot.press(*"soon", "enter")
        await wait_for(pilot, lambda: "expected a duration" in str(app.screen.query_one("#deadline-error").render()),
                       what="the dialog saying what it expects")
        assert showing(app, DeadlineDialog) and project.deadline() is None
        await pilot.press(*["backspace"] * 4, *"2h", "enter")
        await answered(pilot, app, DeadlineDialog)
        await wait_for(pilot, lambda: "deadline" in _bar(app) and "left" in _bar(app), what="the deadline shown")
        assert project.deadline() is not None and project.deadline().how == "console: 2h"

        await pilot.press("d")
        await wait_for(pilot, lambda: showing(app, DeadlineDialog), what="the deadline dialog")
        await pilot.press("enter")  # empty: clear it
        await answered(pilot, app, DeadlineDialog)
        await wait_for(pilot, lambda: project.deadline() is None, what="the deadline cleared")
        await wait_for(pilot, lambda: "deadline" not in _bar(app), what="the bar without it")

        await pilot.press("d")
        await wait_for(pilot, lambda: showing(app, DeadlineDialog), what="the deadline dialog")
        await pilot.press(*"1s", "enter")
        await answered(pilot, app, DeadlineDialog)
        await wait_for(pilot, lambda: state_of(app, "sleeper") == "stopped", timeout=120,
                       what="stopped at the deadline")
        assert "stopped at the deadline" in app.main_screen().follow.by_id["sleeper"].reason
