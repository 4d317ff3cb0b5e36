"""Periodic reads off the UI loop.

Each Poller owns one daemon thread that reads, posts the message it returns, then waits
for its interval (or a poke). The next read starts only when the last one has finished
(dolphie's pattern), so a read that hangs for ten seconds (NVML on a GPU that fell off
the bus, a stat on a dead NFS mount) delays its own panel and never stacks up threads or
stalls the screen. One thread per poller, not a Textual worker per read: at 1-4 reads a
second, creating workers was most of the idle console's CPU.

Readings are handed to the screen on one clock: a poller posts at the next tick after its
read (the log's half-second frames for the log, whole seconds for the others), not when the
read happens to finish, so the status, GPU, host and disk readings and the log's new lines land
in the same moment and the screen repaints once for all of them (following a log at 80x24, four
repaints a second became two). A read an action asked for (a poke)
posts at once, and so does the first after a quiet spell (a log line after a pause shows within
a poll). A poller faster than the frame keeps its own pace (tests shorten them)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from textual.dom import DOMNode
from textual.message import Message

FRAME_S = 0.5  # the screen's clock: new log lines are drawn this often (2 frames a second), readings land on it
FRAME_SLACK = 0.05  # frames are at least FRAME_S less this apart, so a poll's jitter is no timer


def next_tick(now: float, period: float = FRAME_S) -> float:
    """The first multiple of `period` on the monotonic clock at or after `now`."""
    return math.ceil(now / period) * period


class Poller:
    def __init__(self, owner: DOMNode, name: str, interval: float,
                 read: Callable[[], Message | None]) -> None:
        self.owner = owner
        self.name = name
        self.interval = interval
        self.read = read
        self.runs = 0
        self.posted = 0  # messages handed to the owner (tests wait for them to be handled)
        self.last_error: str | None = None
        # The clock its posts keep: the log's half second for a poller as fast, whole seconds for
        # the slower ones (status, GPUs, host, disks: they and a big pane's frames share them);
        # none for one faster than that (tests shorten them).
        self.period = 0.0 if interval < FRAME_S / 2 else FRAME_S if interval < 2 * FRAME_S else 2 * FRAME_S
        self._last_post = -math.inf
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Call on the UI loop (on_mount). A stopped poller stays stopped."""
        if self._stopped.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name=f"poll:{self.name}", daemon=True)
        self._thread.start()

    def stop(self, wait: float = 0.0) -> None:
        """Stop after the read in flight; with `wait`, block up to that many seconds for it."""
        self._stopped.set()
        self._wake.set()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(wait)

    def poke(self) -> None:
        """Read again now (after an action) without waiting for the interval; if a read
        is in flight, one more follows it."""
        self._wake.set()

    def _loop(self) -> None:
        poked = False
        while not self._stopped.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                msg = self.read()
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - a poll that fails tries again next time
                msg = None
                self.last_error = f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            if msg is not None and self.period and not poked and now - self._last_post <= self.interval + 2 * self.period:
                # On the clock; a poke meanwhile (an operator's action) posts at once.
                self._wake.wait(max(0.0, next_tick(now, self.period) - now))
            if self._stopped.is_set():
                return
            if msg is not None:
                try:
                    self.owner.post_message(msg)
                    self.posted += 1
                    self._last_post = time.monotonic()
                except Exception:  # noqa: BLE001 - the app is closing
                    return
            self.runs += 1
            poked = self._wake.wait(max(0.0, self.interval - (time.monotonic() - started)))
