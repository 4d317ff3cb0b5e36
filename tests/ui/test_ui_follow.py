"""Following a log costs what `less +F` does: a few frames a second, and only the rows whose
text changed are sent to the terminal."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from textual.app import App, ComposeResult
from ui_harness import showing, wait_for

from console.ui.components.logs.log_view import LogView
from console.ui.logfeed import LogFeed
from console.ui.screens.log_screen import MAX_LINES, LogScreen


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


def test_a_paced_feed_holds_streaming_lines_for_the_next_frame_and_loses_none(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("first\n")
    feed = LogFeed("t", lambda: str(log), max_lines=100, paced=True)
    first = feed.read()
    assert first is not None and first.lines == ["first"]
    with log.open("a") as f:
        f.write("second\nthird\n")
    feed.pace = 3600.0  # the next frame is far off: the lines wait in the file, not in the UI loop
    assert feed.read() is None
    feed.pace = 0.0
    held = feed.read()
    assert held is not None and held.lines == ["second", "third"] and not held.reset


def test_a_paced_feed_shows_another_file_at_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("in a\n")
    b.write_text("in b\n")
    current = [a]
    feed = LogFeed("t", lambda: str(current[0]), max_lines=100, paced=True)
    assert feed.read() is not None
    feed.pace = 3600.0
    current[0] = b  # the operator selected another phase
    other = feed.read()
    assert other is not None and other.reset and other.lines == ["in b"]


class LogScreenApp(App[None]):
    def __init__(self, log: Path) -> None:
        super().__init__()
        self.log_path = log

    def on_mount(self) -> None:
        self.push_screen(LogScreen("train", lambda: str(self.log_path), interval=0.05))


def shown(view: LogView, row: int) -> str | None:
    """The text last drawn on a row of the pane (what the terminal got); row -1 is the bottom."""
    if row < 0:
        row += view.scrollable_content_region.height
    drawn = view._drawn.get(row)
    return drawn[0] if drawn is not None else None


async def test_the_log_screen_shows_the_newest_line_after_a_burst_and_after_a_pause(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("")
    app = LogScreenApp(log)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: showing(app, LogScreen), what="the log screen")
        view = app.screen.query_one(LogView)
        with log.open("a") as f:
            f.write("".join(f"burst {i}\n" for i in range(30_000)))
        await wait_for(pilot, lambda: view.settled and shown(view, -1) == "burst 29999",
                       what="the burst's last line on the bottom row")
        assert len(view.lines) <= MAX_LINES  # more than the screen keeps: the oldest were never held
        with log.open("a") as f:
            f.write("after the burst\n")  # one line, then nothing: it must not wait for more
        await wait_for(pilot, lambda: view.settled and shown(view, -1) == "after the burst",
                       what="a lone line after the burst")
        assert shown(view, -2) == "burst 29999"


async def test_a_paused_log_screen_does_not_move_while_lines_stream_in(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("".join(f"early {i}\n" for i in range(100)))
    app = LogScreenApp(log)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: showing(app, LogScreen), what="the log screen")
        view = app.screen.query_one(LogView)
        await wait_for(pilot, lambda: view.settled and shown(view, -1) == "early 99", what="the first lines")
        await pilot.press("f")
        assert not view.follow
        await wait_for(pilot, lambda: shown(view, 0) is not None, what="the paused pane drawn")
        top, first = shown(view, 0), int(view.scroll_offset.y)
        with log.open("a") as f:
            f.write("".join(f"late {i}\n" for i in range(500)))
        await wait_for(pilot, lambda: view.settled and view.last_line == "late 499", what="the late lines read")
        await pilot.pause()
        assert int(view.scroll_offset.y) == first and view.text_at(first) == top
        assert shown(view, 0) == top and shown(view, -1) == "early 99"
        await pilot.press("end")
        await wait_for(pilot, lambda: shown(view, -1) == "late 499", what="the end shown again")
