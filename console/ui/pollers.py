"""Periodic reads off the UI loop.

A Poller runs its read in a thread worker and schedules the next run only when that
one has finished (dolphie's pattern), so a read that hangs for ten seconds (NVML on a
GPU that fell off the bus, a stat on a dead NFS mount) delays its own panel and never
stacks up threads or stalls the screen.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable

from textual.dom import DOMNode
from textual.message import Message


class Poller:
    def __init__(self, owner: DOMNode, name: str, interval: float,
                 read: Callable[[], Message | None]) -> None:
        self.owner = owner
        self.name = name
        self.interval = interval
        self.read = read
        self.runs = 0
        self.last_error: str | None = None
        self._stopped = False
        self._busy = False
        self._wake_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: contextvars.Context | None = None
        self._timer = None

    def start(self) -> None:
        """Call on the UI loop (on_mount)."""
        self._loop = asyncio.get_running_loop()
        # Callbacks from the thread run in the app's context, so timers they set know their app.
        self._context = contextvars.copy_context()
        self._stopped = False
        self._launch()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def poke(self) -> None:
        """Read again now (after an action) without waiting for the interval; if a read
        is in flight, one more follows it."""
        if self._stopped:
            return
        if self._busy:
            self._wake_pending = True
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._launch()

    def _launch(self) -> None:
        if self._stopped or self._busy:
            return
        self._busy = True
        self._timer = None
        self.owner.run_worker(self._work, name=f"poll:{self.name}", group=f"poll:{self.name}",
                              thread=True, exit_on_error=False)

    def _work(self) -> None:
        started = time.monotonic()
        try:
            msg = self.read()
            self.last_error = None
        except Exception as exc:  # noqa: BLE001 - a poll that fails tries again next time
            msg = None
            self.last_error = f"{type(exc).__name__}: {exc}"
        if msg is not None and not self._stopped:
            self.owner.post_message(msg)
        elapsed = time.monotonic() - started
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._finished, elapsed, context=self._context)
            except RuntimeError:
                pass

    def _finished(self, elapsed: float) -> None:
        self._busy = False
        self.runs += 1
        if self._stopped or not self.owner.is_attached:
            return
        if self._wake_pending:
            self._wake_pending = False
            self._launch()
            return
        delay = self.interval - elapsed
        if delay < 0.005:  # Textual's timers cannot take a zero delay
            self.owner.call_later(self._launch)
            return
        self._timer = self.owner.set_timer(delay, self._launch, name=f"poll:{self.name}")
