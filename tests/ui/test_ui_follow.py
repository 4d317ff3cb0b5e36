"""Following a log costs what `less +F` does: a few frames a second, and only the rows whose
text changed are sent to the terminal."""

from __future__ import annotations

import time
from collections import Counter

from textual.app import App, ComposeResult
from ui_harness import wait_for

from console.ui.components.log_view import LogView


class CountingLog(LogView):
    """Counts the rows it renders: what a frame repaints is what reaches the terminal."""

    def __init__(self, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kw)
        self.rendered: Counter[int] = Counter()

    def render_line(self, y: int):  # type: ignore[no-untyped-def]
        self.rendered[y] += 1
        return super().render_line(y)


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CountingLog(max_lines=1000, id="log")


async def test_a_phase_printing_fast_repaints_the_log_a_few_times_a_second_not_per_read() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CountingLog)
        view.append([f"first {i}" for i in range(30)])
        await wait_for(pilot, lambda: view.settled and view.rendered[0] > 0, what="first frame")
        view.rendered.clear()
        # Twenty reads a second for two seconds (the log poller reads 4 times a second; a
        # loaded machine delivers them in bursts), 5 lines each: 100 lines a second.
        t0 = time.monotonic()
        for k in range(40):
            view.append([f"line {k} {j}" for j in range(5)])
            await pilot.pause(0.05)  # wait-ok: the pace of the phase's output, not a wait for the UI
        await wait_for(pilot, lambda: view.settled, what="the last frame")
        await pilot.pause()
        elapsed = time.monotonic() - t0
        assert view.text_at(view.line_count - 1) == "line 39 4"
        frames = view.rendered[0]
        assert 1 <= frames <= elapsed / 0.5 + 2, (frames, elapsed)


async def test_a_progress_bar_rewritten_in_place_repaints_only_its_own_row() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CountingLog)
        view.append([f"loading shard {i}" for i in range(40)], partial="step 1/100")
        await wait_for(pilot, lambda: view.settled and view.rendered[0] > 0, what="first frame")
        await pilot.pause()
        view.rendered.clear()
        frames = view.frames
        view.append([], partial="step 2/100")
        await wait_for(pilot, lambda: view.settled and view.frames > frames, what="the frame of step 2")
        await wait_for(pilot, lambda: sum(view.rendered.values()) > 0, what="the repaint")
        last = view.scrollable_content_region.height - 1
        assert set(view.rendered) == {last}, view.rendered


async def test_a_paused_log_sends_nothing_while_lines_arrive() -> None:
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(CountingLog)
        view.append([f"early {i}" for i in range(60)])
        await wait_for(pilot, lambda: view.settled and view.rendered[0] > 0, what="first frame")
        view.focus()
        await pilot.press("up")
        assert not view.follow
        await pilot.pause()
        shown = [view._drawn.get(y) for y in range(5)]
        assert shown[0] is not None and shown[0][0] == "early 35"  # paused one line above the end
        view.rendered.clear()
        frames = view.frames
        for k in range(5):
            view.append([f"late {k}"])
        await wait_for(pilot, lambda: view.settled and view.frames > frames, what="the frame")
        await pilot.pause()
        assert sum(view.rendered[y] for y in range(view.scrollable_content_region.height - 1)) == 0
        await pilot.press("end")
        await wait_for(pilot, lambda: view._drawn.get(view.scrollable_content_region.height - 1, (None,))[0]
                       == "late 4", what="the end shown again")
