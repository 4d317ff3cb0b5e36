"""What a newcomer met at 80x24 with their own model: a blocked train whose dialog opened
on a fragment of argv, a toast over the full-screen log's name, a help that read
"verifyingexited" and never said esc closes it, and a phases title that hid the target."""

from __future__ import annotations

import re

from ui_harness import FROZEN, make_app, select, showing, stop_all, wait_for, write_config

from console.core.checks.result import CheckResult
from console.core.config.overlay import write_saved
from console.core.lifecycle.project import Project
from console.ui.components.logs.log_view import LogView
from console.ui.components.phases.phase_list import PhaseList
from console.ui.components.phases.phases_title import phases_title
from console.ui.messages import LogLines
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.help_screen import help_text
from console.ui.screens.log_screen import LogScreen

TARGET = "/home/newcomer/eagle3-console/configs/examples/models/SmolLM2-135M-Instruct"


def train_blocked() -> list[CheckResult]:
    """What a fresh pipeline's train start fails on: its needs, the store and its checks,
    with a command's argv in the evidence."""
    argv = ["python", "-m", "pipeline.store.check", "--path", "/home/newcomer/eagle3-console/configs/examples/"
            ".eagle3-real/store", "--model", TARGET, "--sample", "64", "--json"]
    return [
        CheckResult("needs-done", "needs", "error", "fail", "not done yet: extract is pending",
                    {"needs": ["extract"], "missing": {"extract": "pending"}}),
        CheckResult("store-is-what-extract-wrote", "fresh", "error", "fail",
                    "no record of the phase that wrote it", {"path": argv[4]}),
        CheckResult("store-intact", "store_intact", "error", "fail", "the store does not exist",
                    {"argv": argv, "path": argv[4], "detail": "no manifest.jsonl under " + argv[4]}),
    ]


def test_help_keeps_each_state_apart_from_its_text_and_says_esc_closes_it() -> None:
    for width in (78, None):
        text = help_text(width).plain
        assert re.search(r"verifying +exited 0", text), text
        assert not re.search(r"[a-z]exited", text)
        assert "esc closes this help" in text


async def test_the_train_blocked_dialog_opens_at_its_header(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(BlockedDialog("train", train_blocked()))
        await wait_for(pilot, lambda: showing(app, BlockedDialog), what="dialog")
        await pilot.pause()
        scroll = app.screen.query_one("#dialog-scroll")
        assert scroll.max_scroll_y > 0  # it does scroll at 80x24...
        assert scroll.scroll_y == 0  # ...and opens at the top: "3 check(s) fail." in view
        header = app.screen.query_one("#dialog-scroll .dialog-text")
        assert header.region.height > 0 and scroll.region.contains_region(header.region)


async def test_a_toast_leaves_the_full_screen_logs_header_readable(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await select(pilot, app, "prep")
        await pilot.press("l")
        await wait_for(pilot, lambda: showing(app, LogScreen), what="the log screen")
        app.notify("prep done: a toast long enough to take two lines of its rack", timeout=30)
        await wait_for(pilot, lambda: app.screen.query("Toast"), what="toast")
        await pilot.pause()
        header = app.screen.query_one("#log-screen-header").region
        for toast in app.screen.query("Toast"):
            assert not toast.region.overlaps(header), f"a toast covers the log's header: {toast.region}"


def test_the_phases_title_names_the_target_first_when_it_is_short_of_room() -> None:
    saved = {"target": TARGET, "regen_limit": "8", "regen_max_new": "16"}
    for width in (32, 40, 76):
        title = phases_title("real-target", saved, width, target=TARGET)
        assert "SmolLM2-135M-Instruct" in title and len(title) <= width, title
    assert phases_title("uitest", {"workdir": "./work"}) == "phases · uitest · set workdir=./work"


async def test_the_phases_title_shows_the_target_in_effect_at_80x24(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace("  workdir: ./work\n", "  workdir: ./work\n  target: ./models/base\n"))
    write_saved(cfg, {"target": TARGET, "workdir": "./work"})
    project = Project.load(cfg)
    app = make_app(project)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            phases = app.main_screen().query_one(PhaseList)
            await wait_for(pilot, lambda: "SmolLM2-135M-Instruct" in str(phases.border_title), timeout=10,
                           what="the target in the phases title")
            assert len(str(phases.border_title)) <= phases.size.width
    finally:
        stop_all(project)


SKIP_SUMMARY = ("regenerate: skipped 8 of 16 records: prompt_too_long (the chat so far is over "
                "--max-prompt-tokens 512); raise max_prompt or pick shorter chats")


async def _detail_log(pilot, app, lines: list[str]) -> LogView:  # type: ignore[no-untyped-def]
    """The detail pane's log at 80x24 with `lines` in it, drawn."""
    main = app.main_screen()
    main.pollers["status"].poke()
    await select(pilot, app, "prep")
    view = main.query_one("#log", LogView)
    main.post_message(LogLines("main", lines, "", reset=True, path="/w/output.log"))
    await wait_for(pilot, lambda: view.last_line == lines[-1] and view.settled, what="the lines drawn")
    await pilot.pause()
    return view


async def test_the_detail_log_wraps_a_long_line_instead_of_cutting_it(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project, intervals=FROZEN)
    async with app.run_test(size=(80, 24)) as pilot:
        view = await _detail_log(pilot, app, ["regenerate: done", SKIP_SUMMARY])
        width, height = view.scrollable_content_region.width, view.scrollable_content_region.height
        assert 0 < width < len(SKIP_SUMMARY)  # the pane is narrower than the line
        shown = "".join(view.render_line(y).text for y in range(height))
        assert "".join(SKIP_SUMMARY.split()) in "".join(shown.split())  # every word of it, on rows of its own


async def test_a_paused_wrapped_detail_log_keeps_its_place_while_old_lines_leave(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project, intervals=FROZEN)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main_screen()
        view = await _detail_log(pilot, app, [f"line {i:04d} " + "x" * 90 for i in range(400)])  # 2-3 rows each
        view.focus()
        await pilot.press("up", "up", "up", "up", "up", "up")  # paused, a few rows up
        await pilot.pause()
        top = view.render_line(0).text
        assert not view.follow and top.strip()
        more = [f"more {i:04d} " + "y" * 90 for i in range(700)]  # past the 1000 kept: old lines leave
        main.post_message(LogLines("main", more, "", reset=False, path="/w/output.log"))
        await wait_for(pilot, lambda: view.last_line == more[-1], what="the new lines kept")
        await pilot.pause()
        assert view.dropped > 0
        assert view.render_line(0).text == top  # the same row in view, wherever it now is
