"""What a newcomer met at 80x24 with their own model: a blocked train whose dialog opened
on a fragment of argv, a toast over the full-screen log's name, a help that read
"verifyingexited" and never said esc closes it, and a phases title that hid the target."""

from __future__ import annotations

import re

from ui_harness import make_app, select, showing, stop_all, wait_for, write_config

from console.core.checks.result import CheckResult
from console.core.config.saved import write_saved
from console.core.project import Project
from console.ui.components.phase_list import PhaseList
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.help_screen import help_text
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.main_screen import phases_title

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
