"""Feeds a LogView from a phase's output.log: a LogTail per file, read in a poller's
thread, with terminal control sequences removed so a log cannot repaint the console.

A paced feed (the console's views) reads and posts at most once a frame while lines
stream in, not at every poll: lines posted between two frames would only wait in the view,
and each post wakes the UI loop. A quiet log is still read at every poll, so a line after
a pause shows within one poll interval, and a new file (another phase selected) at once."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

from console.core.files.logtail import LogTail
from console.core.text.terminal_text import has_format, strip_format
from console.ui.messages import LogLines
from console.ui.pollers import FRAME_S, FRAME_SLACK

_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


def clean(line: str) -> str:
    if "\t" in line:
        line = line.expandtabs(4)
    return strip_format(_CONTROL.sub("", line))


def clean_lines(lines: list[str]) -> list[str]:
    if not lines:
        return lines
    # One scan decides whether any line needs cleaning; most logs need none.
    joined = "".join(lines)
    if not _CONTROL.search(joined) and not has_format(joined) and "\t" not in joined:
        return lines
    return [clean(ln) for ln in lines]


class LogFeed:
    def __init__(self, key: str, path_of: Callable[[], str | None], max_lines: int,
                 paced: bool = False) -> None:
        self.key = key
        self.path_of = path_of
        self.max_lines = max_lines
        self.pace = FRAME_S - FRAME_SLACK if paced else 0.0  # seconds between posts, at least
        self.tail: LogTail | None = None
        self._last_partial = ""
        self._posted = -math.inf

    def read(self) -> LogLines | None:
        path = self.path_of()
        reset = False
        if (path is not None and self.tail is not None and self.tail.path == path
                and time.monotonic() - self._posted < self.pace):
            return None
        if path is None:
            if self.tail is None:
                return None
            self.tail = None
            return LogLines(self.key, [], "", True, None)
        if self.tail is None or self.tail.path != path:
            self.tail = LogTail(path, max_lines=self.max_lines)
            reset = True
        lines = self.tail.poll()
        partial = self.tail.partial or ""
        if not lines and not reset and partial == self._last_partial:
            return None
        self._last_partial = partial
        self._posted = time.monotonic()
        return LogLines(self.key, clean_lines(lines[-self.max_lines:]), clean(partial), reset, path)
