"""Tail a phase's output.log by byte offset, holding a bounded window of lines.

A phase can print 100k lines a second for days and the console can attach to a 1 GB log,
so nothing here reads a file whole or keeps more than `max_lines` lines: each poll reads the
bytes added since the last one (at most `max_bytes`), and when it has fallen further behind
than that it jumps to the last ~`max_lines` lines and says how much it skipped. Progress
bars rewrite their line with carriage returns; only the last rewrite of a line is kept, and
the one still in flight (no newline yet) is exposed as `partial` so the view need not wait.
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque

from pipeline.sizes import format_bytes

MARKER_PREFIX = "··· "
TRUNCATED = MARKER_PREFIX + "log truncated: reading it again from the start"
ROTATED = MARKER_PREFIX + "log replaced by a new file: reading it from the start"
LINE_TRUNCATED = " …[line truncated]"
DEFAULT_MAX_BYTES = 8 << 20
_BACKSCAN_BLOCK = 1 << 16


def is_marker(line: str) -> bool:
    """True for the lines the tailer itself inserts (skips, truncation, rotation)."""
    return line.startswith(MARKER_PREFIX)


class LogTail:
    """The tail of one log file.

    Contract:
    - `poll(max_bytes=8 MiB) -> list[str]`: the complete lines added since the last poll
      (newest last, at most `max_lines`, also appended to `lines`), plus marker lines
      (`is_marker`) for a truncated or replaced file (reading restarts at 0) and for bytes
      skipped. Never raises: a missing file gives [] with `exists` False; an unreadable one
      gives [] with `error` set. Reads at most `max_bytes` per call; when more than that is
      pending (first attach to a big log, or a writer far ahead) it jumps to about the last
      `max_lines` lines, adds one "skipped" marker and counts `skipped_bytes`.
    - A line with carriage returns keeps only its last non-empty segment. The unterminated
      tail, if it holds a carriage return (a progress bar in flight), is `partial` (its
      newest non-empty segment) until its newline arrives; otherwise `partial` is None.
    - Lines longer than `max_line_bytes` are cut there and end with `LINE_TRUNCATED` (bytes
      for a line still in flight, characters once complete). Bytes decode as UTF-8 with
      replacement characters; nothing raises on bad bytes.
    - `lines`: deque of retained lines (maxlen `max_lines`); `appended`: lines ever put in
      it, so the absolute number of `lines[0]` is `appended - len(lines)`; `lines_seen`:
      complete lines read from the file; `offset`: the next byte to read.
    - Thread-safe: one poller and any readers. Readers on another thread use `snapshot()`
      (a list copy) or `search()` rather than iterating `lines` while a poll runs.
    """

    def __init__(self, path: str | os.PathLike[str], max_lines: int = 5000, max_line_bytes: int = 4096) -> None:
        if max_lines < 1 or max_line_bytes < 1:
            raise ValueError("max_lines and max_line_bytes must be positive")
        self.path = os.fspath(path)
        self.max_lines = max_lines
        self.max_line_bytes = max_line_bytes
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.appended = 0
        self.lines_seen = 0
        self.skipped_bytes = 0
        self.exists = False
        self.error: str | None = None
        self._offset = 0
        self._ident: tuple[int, int] | None = None
        self._lock = threading.RLock()
        self._reset_pending()

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def partial(self) -> str | None:
        with self._lock:
            if not self._had_cr:
                return None
            if self._cur:
                return self._render(bytes(self._cur), self._cur_trunc)
            return self._render(self._prev, self._prev_trunc) if self._prev else None

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def search(self, pattern: str | re.Pattern[str], start: int = 0, backwards: bool = False) -> int | None:
        """Index in `lines` of the first line at or after `start` (at or before, backwards)
        matching `pattern`; None if none. A str is literal text, case-insensitive unless it
        has a capital letter (smart case); pass a compiled pattern for a regex. No wrap."""
        if isinstance(pattern, str):
            if not pattern:
                return None
            flags = re.IGNORECASE if pattern == pattern.lower() else 0
            rx = re.compile(re.escape(pattern), flags)
        else:
            rx = pattern
        lines = self.snapshot()
        if not lines:
            return None
        start = max(0, min(start, len(lines) - 1))
        indexes = range(start, -1, -1) if backwards else range(start, len(lines))
        for i in indexes:
            if rx.search(lines[i]):
                return i
        return None

    def poll(self, max_bytes: int = DEFAULT_MAX_BYTES) -> list[str]:
        with self._lock:
            try:
                out = self._poll(max(1, max_bytes))
            except OSError as exc:
                self.error = f"{self.path}: cannot read ({exc.strerror or exc})"
                return []
            if len(out) > self.max_lines:
                dropped = [ln for ln in out[: -self.max_lines] if is_marker(ln)]
                out = out[-self.max_lines :]
                if dropped and not is_marker(out[0]):
                    out[0] = dropped[-1]  # the reader must still learn what happened
            self.lines.extend(out)
            self.appended += len(out)
            return out

    def _poll(self, max_bytes: int) -> list[str]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.exists = False
            return []
        try:
            st = os.fstat(fd)
            out: list[str] = []
            ident = (st.st_dev, st.st_ino)
            if self._ident is not None and ident != self._ident:
                self._restart(out, ROTATED)
            elif st.st_size < self._offset:
                self._restart(out, TRUNCATED)
            self._ident = ident
            self.exists = True
            self.error = None
            size = st.st_size
            if size - self._offset > max_bytes:
                start = self._tail_start(fd, size, max_bytes)
                if start > self._offset:
                    skipped = start - self._offset
                    self.skipped_bytes += skipped
                    self._reset_pending()
                    out.append(f"{MARKER_PREFIX}{format_bytes(skipped)} of earlier output not shown (open {self.path} to read it)")
                    self._offset = start
            want = min(size - self._offset, max_bytes)
            if want > 0:
                data = os.pread(fd, want, self._offset)
                self._offset += len(data)
                out.extend(self._consume(data))
            return out
        finally:
            os.close(fd)

    def _restart(self, out: list[str], marker: str) -> None:
        self._offset = 0
        self._reset_pending()
        out.append(marker)

    def _tail_start(self, fd: int, size: int, max_bytes: int) -> int:
        """An offset at a line start with about `max_lines` lines after it, no further back
        than `max_bytes` from the end."""
        limit = max(self._offset, size - max_bytes)
        need = self.max_lines  # max_lines - 1 lines, leaving room for the "skipped" marker
        pos = size
        while pos > limit:
            lo = max(limit, pos - _BACKSCAN_BLOCK)
            block = os.pread(fd, pos - lo, lo)
            i = len(block)
            while True:
                i = block.rfind(b"\n", 0, i)
                if i < 0:
                    break
                need -= 1
                if need == 0:
                    return lo + i + 1
            pos = lo
        head = os.pread(fd, min(_BACKSCAN_BLOCK, size - limit), limit)
        nl = head.find(b"\n")
        return limit + nl + 1 if nl >= 0 and limit > self._offset else limit

    def _consume(self, data: bytes) -> list[str]:
        last_nl = data.rfind(b"\n")
        if last_nl < 0:
            self._feed_pending(data)
            return []
        count = data.count(b"\n")
        self.lines_seen += count
        if count > self.max_lines:
            pos = last_nl
            for _ in range(self.max_lines):
                pos = data.rfind(b"\n", 0, pos)
            self._reset_pending()
            out = self._complete_lines(data[pos + 1 : last_nl])
        else:
            first_nl = data.find(b"\n")
            self._feed_pending(data[:first_nl])
            out = [self._finish_pending()]
            if first_nl < last_nl:
                out.extend(self._complete_lines(data[first_nl + 1 : last_nl]))
        self._feed_pending(data[last_nl + 1 :])
        return out

    def _complete_lines(self, block: bytes) -> list[str]:
        text = block.decode("utf-8", "replace")
        out = text.split("\n")
        limit = self.max_line_bytes
        if "\r" in text or len(text) > limit:
            out = [self._fix(ln) if ("\r" in ln or len(ln) > limit) else ln for ln in out]
        return out

    def _fix(self, line: str) -> str:
        if "\r" in line:
            line = next((seg for seg in reversed(line.split("\r")) if seg), "")
        if len(line) > self.max_line_bytes:
            line = line[: self.max_line_bytes] + LINE_TRUNCATED
        return line

    def _reset_pending(self) -> None:
        self._prev = b""
        self._prev_trunc = False
        self._cur = bytearray()
        self._cur_trunc = False
        self._had_cr = False

    def _append_cur(self, data: bytes) -> None:
        room = self.max_line_bytes - len(self._cur)
        if len(data) <= room:
            self._cur += data
        else:
            if room > 0:
                self._cur += data[:room]
            self._cur_trunc = True

    def _close_segment(self) -> None:
        if self._cur:
            self._prev = bytes(self._cur)
            self._prev_trunc = self._cur_trunc
        self._cur = bytearray()
        self._cur_trunc = False
        self._had_cr = True

    def _feed_pending(self, data: bytes) -> None:
        """Add bytes of the unterminated line, keeping only what its final form can need:
        the newest non-empty segment closed by a carriage return and the open one."""
        if not data:
            return
        if b"\r" not in data:
            self._append_cur(data)
            return
        parts = data.split(b"\r")
        self._append_cur(parts[0])
        self._close_segment()
        for seg in reversed(parts[1:-1]):
            if seg:
                self._append_cur(seg)
                self._close_segment()
                break
        self._append_cur(parts[-1])

    def _finish_pending(self) -> str:
        if self._cur:
            line = self._render(bytes(self._cur), self._cur_trunc)
        else:
            line = self._render(self._prev, self._prev_trunc)
        self._reset_pending()
        return line

    @staticmethod
    def _render(seg: bytes, truncated: bool) -> str:
        text = seg.decode("utf-8", "replace")
        return text + LINE_TRUNCATED if truncated else text
