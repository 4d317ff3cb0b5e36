"""Panel and plumbing behaviour an operator would notice: polls that never pile up, logs
that stay bounded and keep up with carriage-return progress, a loud disk warning, a
console that leaves when its terminal dies, themes that always load."""

from __future__ import annotations

import os
import pty
import threading
import time
from functools import partial
from pathlib import Path

from textual.app import App, ComposeResult
from textual.message import Message
from textual.screen import Screen
from textual.worker import WorkerState
from ui_harness import Notices, wait_for

from console.core.lifecycle.snapshot import SpaceNeed
from console.core.telemetry.history import DiskForecast
from console.core.telemetry.samples import DiskReading, ShmReading, VolumeSample
from console.core.text.errors import Eagle3Error
from console.ui import watchdog
from console.ui.components.logs.journal_view import JournalView
from console.ui.components.logs.log_view import LogView
from console.ui.components.machine.disk_panel import DiskPanel
from console.ui.logfeed import LogFeed, clean
from console.ui.messages import LogLines, ShmUpdated
from console.ui.pollers import Poller
from console.ui.theming import load_themes
from console.ui.watchdog import TtyWatchdog
from console.ui.worker_notices import WorkerNotices


class Tick(Message):
    pass


class Host(App[None]):
    def __init__(self, widget=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.widget = widget
        self.ticks = 0

    def compose(self) -> ComposeResult:
        if self.widget is not None:
            yield self.widget

    def on_tick(self, _: Tick) -> None:
        self.ticks += 1


async def test_slow_poll_never_piles_up() -> None:
    app = Host()
    active = []
    peak = []
    lock = threading.Lock()

    def slow_read() -> Tick:
        with lock:
            active.append(1)
            peak.append(len(active))
        time.sleep(0.3)  # wait-ok: a stuck NVML call, ten times the interval
        with lock:
            active.pop()
        return Tick()

    async with app.run_test() as pilot:
        poller = Poller(app, "slow", 0.03, slow_read)
        poller.start()
        await wait_for(pilot, lambda: app.ticks >= 3, timeout=10, what="three polls")
        poller.stop()
    assert max(peak) == 1


async def test_log_feed_keeps_up_bounded_and_shows_cr_progress(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    with log.open("w") as f:
        for i in range(200_000):
            f.write(f"line {i}\n")
        f.write("step 1/3\rstep 2/3\r")
    feed = LogFeed("t", lambda: str(log), max_lines=500)
    first = feed.read()
    assert first is not None and first.reset
    assert len(first.lines) <= 500 and first.lines[-1] == "line 199999"
    assert first.partial == "step 2/3"  # the progress line in flight, not stalled behind its \r
    view = LogView(max_lines=500)
    view.append(first.lines, first.partial)
    assert view.last_line == "step 2/3"
    with log.open("a") as f:
        f.write("step 3/3\ndone\n")
    nxt = feed.read()
    assert nxt is not None and nxt.lines == ["step 3/3", "done"] and nxt.partial == ""
    view.append(nxt.lines, nxt.partial)
    for k in range(50):
        view.append([f"more {k} {j}" for j in range(100)])
    assert len(view.lines) <= 500  # memory bounded however much arrives
    assert view.last_line == "more 49 99"


def test_log_lines_lose_terminal_control_sequences() -> None:
    assert clean("\x1b[31mred\x1b[0m plain\x07") == "red plain"
    assert clean("a\tb") == "a   b"


async def test_disk_panel_warns_loudly_when_the_rest_will_not_fit() -> None:
    panel = DiskPanel()
    app = Host(panel)
    async with app.run_test(size=(100, 10)) as pilot:
        fc = DiskForecast()
        r1 = DiskReading(t=0.0, volumes=(VolumeSample("/data", 1000 * 10**9, 900 * 10**9, 100 * 10**9),))
        r2 = DiskReading(t=10.0, volumes=(VolumeSample("/data", 1000 * 10**9, 901 * 10**9, 99 * 10**9),))
        fc.update(r1)
        fc.update(r2)
        forecasts = {f.path: f for f in fc.forecasts()}
        panel.show(r2, forecasts, {"/data": SpaceNeed(150 * 10**9, ("extract",))})
        await pilot.pause()
        text = str(panel.render())
        assert "WILL NOT FIT" in text and "extract" in text and "150.0G" in text
        assert "full in" in text  # 100 MB/s into 99 GB: the forecast is drawn too
        assert panel.has_class("-warning")
        panel.show(r2, forecasts, {"/data": SpaceNeed(10 * 10**9, ("extract",))})
        await pilot.pause()
        assert "WILL NOT FIT" not in str(panel.render())


def test_watchdog_fires_when_the_terminal_hangs_up(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, slave = pty.openpty()
    fired = threading.Event()
    probes: list[bool] = []
    looked = threading.Event()
    real_probe = watchdog.terminal_alive

    def probe(fd: int) -> bool:
        alive = real_probe(fd)
        probes.append(alive)
        if len(probes) >= 4:  # the look at start, then three of the watch loop's
            looked.set()
        return alive

    monkeypatch.setattr(watchdog, "terminal_alive", probe)
    dog = TtyWatchdog(fired.set, fd=slave, interval=0.05)
    assert dog.start()
    assert looked.wait(10), f"the watchdog looked at the terminal {len(probes)} times, not 4"
    assert all(probes[:4]) and not fired.is_set(), "a live terminal fired the watchdog"
    os.close(master)
    assert fired.wait(5)
    os.close(slave)


def test_themes_dark_light_ansi_and_fallback(tmp_path: Path) -> None:
    names = [t.name for t in load_themes()]
    assert {"eagle3-dark", "eagle3-light", "eagle3-ansi"} <= set(names)
    ansi = next(t for t in load_themes() if t.name == "eagle3-ansi")
    assert ansi.ansi
    fallback = [t.name for t in load_themes(tmp_path / "absent")]
    assert fallback == ["eagle3-dark", "eagle3-light", "eagle3-ansi"]


def test_stylesheet_uses_theme_variables_only() -> None:
    import re

    css = (Path(__file__).resolve().parents[2] / "console" / "ui" / "console.tcss").read_text()
    assert not re.findall(r"#[0-9a-fA-F]{3,8}\b(?![\w-]*\s*[{,])", css.split("*/", 1)[1].replace("#", " #"))
    for prop in re.findall(r"(?:color|background|border[\w-]*):\s*([^;]+);", css):
        for word in prop.split():
            assert word.startswith("$") or word in ("solid", "heavy", "round", "none", "transparent", "bold") \
                or word.endswith("%"), f"literal colour in console.tcss: {prop}"


class Failing(WorkerNotices, Screen[None]):
    QUIET_WORKER_GROUPS = frozenset({"background"})

    def on_mount(self) -> None:
        self.started = []
        for name, group, error in (("check prep", "checks", OSError("disk gone")),
                                   ("stop train", "stop", Eagle3Error("train was not running")),
                                   ("pre-flight gated", "background", RuntimeError("quiet"))):
            self.started.append(self.run_worker(partial(_raise, error), name=name, group=group, thread=True, exit_on_error=False))


def _raise(error: Exception) -> None:
    raise error


async def test_a_failed_worker_is_one_notice_never_a_traceback_and_the_console_stays_up() -> None:
    notices = Notices()
    app = App[None]()
    async with app.run_test(size=(80, 24), message_hook=notices.hook) as pilot:
        screen = Failing()
        await app.push_screen(screen)
        await wait_for(pilot, lambda: all(w.state is WorkerState.ERROR for w in screen.started)
                       and len(notices.posted) >= 2, what="three failed workers, two notices")
        await pilot.pause()
        assert sorted(notices.posted) == [("error", "check prep failed: OSError: disk gone"),
                                          ("error", "train was not running")]
        assert app.is_running and app.return_code is None


class Panels(App[None]):
    """Records what reaches its handlers, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.handled: list[object] = []

    def on_shm_updated(self, msg: ShmUpdated) -> None:
        self.handled.append(msg.reading.t)

    def on_log_lines(self, msg: LogLines) -> None:
        self.handled.append(msg.lines[0])


async def test_a_burst_of_panel_readings_draws_only_the_latest_but_every_log_line_lands() -> None:
    """A UI loop busy for a few seconds must not replay each stale 1 Hz reading afterwards;
    log lines each add something, so none is dropped."""
    app = Panels()
    async with app.run_test() as pilot:
        for t in range(5):  # queued in one go, before the loop handles any
            app.post_message(ShmUpdated(ShmReading(float(t), total=10, used=t, free=10 - t)))
        for n in range(3):
            app.post_message(LogLines("log", [f"line {n}"], "", reset=False, path=None))
        await wait_for(pilot, lambda: "line 2" in app.handled, what="the burst handled")
    assert app.handled == [4.0, "line 0", "line 1", "line 2"]


async def test_the_journal_stays_where_the_operator_scrolled_until_a_new_record_comes() -> None:
    view = JournalView()
    app = Host(view)
    records = [{"t": 1_750_000_000.0 + i, "event": "checks", "phase": "prep", "summary": f"record {i}"}
               for i in range(60)]
    async with app.run_test(size=(80, 12)) as pilot:
        view.show(records)
        await wait_for(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y,
                       what="the end of the records")
        view.scroll_home(animate=False)
        await wait_for(pilot, lambda: view.scroll_y == 0, what="scrolled to the top")
        view.show(list(records))  # the next poll reads the same records
        await pilot.pause()
        assert view.scroll_y == 0
        view.show(records + [{"t": 1_750_000_100.0, "event": "stop", "phase": "prep", "summary": "new"}])
        await wait_for(pilot, lambda: view.scroll_y == view.max_scroll_y > 0, what="the new record in view")
        assert "new" in str(view.query_one("#journal-body").render())
