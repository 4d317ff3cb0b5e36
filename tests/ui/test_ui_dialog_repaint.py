"""A dialog over a quiet console: readings keep landing beneath it, and nothing on screen
changes, so nothing is drawn again. Textual repainted the whole screen and the dialog's
tinted copy of it at each reading (at the product's pace, a full redraw a second for as long
as a question waits on the operator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ui_harness import make_app, showing, wait_for

from console.ui.screens.ask_dialog import AskDialog


def _counting(drawn: dict[str, int], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kw: Any) -> Any:
        drawn[name] += 1
        return real(*args, **kw)
    return counted


async def test_readings_beneath_an_open_dialog_redraw_nothing_when_nothing_changed(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)  # the status poller posts ten readings a second
    async with app.run_test(size=(100, 30)) as pilot:
        main = app.main_screen()
        await wait_for(pilot, lambda: main.follow.statuses, what="first statuses")
        app.push_screen(AskDialog("a question?", "nothing changes beneath it", yes="Yes"))
        await wait_for(pilot, lambda: showing(app, AskDialog), what="the dialog")
        await pilot.pause()
        dialog = app.screen
        drawn = {"render_update": 0, "render_full_update": 0}  # every redraw, and the whole-screen ones
        for name in drawn:
            setattr(dialog._compositor, name, _counting(drawn, name, getattr(dialog._compositor, name)))
        status = main.pollers["status"]
        seen = main.follow.looks
        await wait_for(pilot, lambda: main.follow.looks >= seen + 10 and status.posted >= seen + 10,
                       what="ten readings handled beneath the dialog")
        await pilot.pause()
        assert drawn["render_full_update"] <= 1, \
            f"{drawn['render_full_update']} whole redraws for {main.follow.looks - seen} readings that changed nothing"
        before = drawn["render_update"]
        main.query_one("#storage").border_title = "changed beneath the dialog"
        await wait_for(pilot, lambda: drawn["render_update"] > before, what="a change beneath the dialog drawn")
        assert "changed beneath the dialog" in app.export_screenshot().replace("&#160;", " ")
