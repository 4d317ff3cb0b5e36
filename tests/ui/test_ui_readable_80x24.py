"""What an operator reads at 80x24 beyond the main screen. `e` on a phase: every check full
screen, each with its name, verdict, message and evidence one fact a row (an argv as the words
it runs, an output tail line by line), where the detail's pane is about 26 cells wide and
unfolded raw JSON a few words a row. `?`: the help, taller than the screen, says more is below."""

from __future__ import annotations

from test_ui_newcomer_80x24 import train_blocked
from ui_harness import FROZEN, make_app, select, showing, wait_for

from console.core.checks.result import CheckResult
from console.ui.components.checks.check_report import report_lines
from console.ui.components.checks.checks_view import ChecksView
from console.ui.screens.checks_screen import ChecksScreen

COMMAND = CheckResult(
    "sglang-torch-sees-8-gpus", "command", "error", "fail", "exited 1, expected 0: torch sees 0 GPUs, expected 8",
    {"argv": ["python", "-c", "import torch; n = torch.cuda.device_count(); assert n == 8, f'torch sees {n} GPUs'"],
     "cwd": "/home/newcomer/eagle3-console/configs", "expected_exit": 0,
     "output_tail": ["Traceback (most recent call last):", "AssertionError: torch sees 0 GPUs, expected 8"],
     "exit_code": 1})


def test_the_report_reads_one_fact_a_row_with_no_json_and_no_shell_quoting() -> None:
    rows = [ln.plain for ln in report_lines([*train_blocked(), COMMAND], 76)]
    text = "\n".join(rows)
    assert all(len(r) <= 76 for r in rows)
    assert "needs-done  fails (error)" in text and "sglang-torch-sees-8-gpus  fails (error)" in text
    assert "{" not in text.replace("{n}", "") and '"' not in text and "'\"'\"'" not in text
    assert any(r.split() == ["missing.extract", "pending"] for r in rows), text  # a mapping's keys, a row each
    argvs = [r.split()[1:4] for r in rows if r.strip().startswith("argv ")]
    assert argvs == [["python", "-m", "pipeline.store.check"], ["python", "-c", "import"]]  # the words they run
    tail = next(i for i, r in enumerate(rows) if r.strip().startswith("output_tail "))
    assert rows[tail].endswith("Traceback (most recent call last):")
    assert rows[tail + 1].strip() == "AssertionError: torch sees 0 GPUs, expected 8"  # the next line of the tail


async def test_e_opens_every_check_full_screen_at_80x24(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project, intervals=FROZEN)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main_screen()
        await select(pilot, app, "gated")
        main.remember_checks("gated", "check", main.project.check("gated", journal=False))
        await wait_for(pilot, lambda: main.query_one(ChecksView).results is not None, what="the checks shown")
        await pilot.press("e")
        await wait_for(pilot, lambda: showing(app, ChecksScreen), what="the checks screen")
        await pilot.pause()
        screen = app.screen
        assert screen.region.size == (80, 24)
        report = screen.query_one("#checks-screen-report")
        assert report.region.width >= 78  # the whole width, not a pane of the detail
        text = "\n".join(ln.plain for ln in report._lines(report.content_region.width))
        assert "input-present  fails (error)" in text and "needs-done  passes (error)" in text
        assert "/nonexistent-eagle3-ui/missing-input does not exist" in text
        assert any(ln.split() == ["path", "/nonexistent-eagle3-ui/missing-input"] for ln in text.splitlines())
        assert "gated" in str(screen.query_one("#checks-screen-header").render())
        assert "1 fail · 1 pass" in str(screen.query_one("#checks-screen-header").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: not showing(app, ChecksScreen), what="back to the phases")


async def test_help_at_80x24_says_more_is_below_until_its_end_and_fits_at_160x48(project) -> None:  # type: ignore[no-untyped-def]
    from console.ui.screens.help_screen import MORE, HelpScreen

    for size, taller in (((80, 24), True), ((160, 48), False)):
        app = make_app(project, intervals=FROZEN)
        async with app.run_test(size=size) as pilot:
            await pilot.press("question_mark")
            await wait_for(pilot, lambda app=app: showing(app, HelpScreen), what="help")
            box = app.screen.query_one("#dialog-box")
            await wait_for(pilot, lambda box=box: box.virtual_size.height > 0 and box.border_subtitle, what="help laid out")
            await pilot.pause()
            assert (box.max_scroll_y > 0) == taller
            assert (box.border_subtitle == MORE) == taller, box.border_subtitle
            if taller:
                await pilot.press("end")
                await wait_for(pilot, lambda box=box: box.scroll_y >= box.max_scroll_y, what="the end of the help")
                await wait_for(pilot, lambda box=box: box.border_subtitle == "esc closes", what="no cue at the end")
