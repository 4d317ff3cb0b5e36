"""Exits the console cleanly when its terminal goes away (SSH dropped without tmux).

A hung-up terminal makes every terminal ioctl fail with EIO; without this the process
could linger, writing to nothing. The phases are unaffected either way: they run in
their own sessions."""

from __future__ import annotations

import os
import sys
import termios
import threading
from collections.abc import Callable


def terminal_alive(fd: int) -> bool:
    try:
        termios.tcgetattr(fd)
        return True
    except (termios.error, OSError):
        return False


class TtyWatchdog:
    def __init__(self, on_lost: Callable[[], None], fd: int | None = None, interval: float = 2.0) -> None:
        self.on_lost = on_lost
        self.fd = fd if fd is not None else _terminal_fd()
        self.interval = interval
        self.fired = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """False (and nothing watched) when there is no terminal to watch."""
        if self.fd is None or not terminal_alive(self.fd):
            return False
        self._thread = threading.Thread(target=self._watch, name="tty-watchdog", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            if self.fd is not None and not terminal_alive(self.fd):
                self.fired = True
                self.on_lost()
                return


def _terminal_fd() -> int | None:
    for stream in (sys.__stdout__, sys.__stdin__):
        try:
            if stream is not None and os.isatty(stream.fileno()):
                return stream.fileno()
        except (OSError, ValueError):
            continue
    return None
