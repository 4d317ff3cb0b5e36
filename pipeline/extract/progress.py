"""Progress of the whole run, as the console and the log show it.

Counts come from the manifest files of every rank (read incrementally by offset), so a
sharded run reports one global figure whichever rank emits it, and a resumed run starts
from what is already done rather than from zero.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.events import EventWriter
from pipeline.sizes import format_bytes
from pipeline.store.manifest import manifest_files, parse_entries


class ManifestTally:
    def __init__(self, out: Path, total: int, stale: set[int] | frozenset[int] = frozenset()) -> None:
        self.out = Path(out)
        self.total = total
        self._stale = set(stale)  # lines already there for these indices are not counted (resume dropped them)
        self._seen = bytearray(total)
        self._offsets: dict[Path, tuple[int, int]] = {}
        self.done = 0
        self.tokens = 0
        self.bytes = 0

    def refresh(self) -> None:
        for path in manifest_files(self.out):
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    inode, offset = self._offsets.get(path, (st.st_ino, 0))
                    if inode != st.st_ino or st.st_size < offset:
                        offset = 0
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1
            self._offsets[path] = (st.st_ino, offset + end)
            for e in parse_entries(data[:end]):
                i = e["index"]
                if 0 <= i < self.total and not self._seen[i] and i not in self._stale:
                    self._seen[i] = 1
                    self.done += 1
                    self.tokens += int(e.get("tokens", 0))
                    self.bytes += int(e.get("bytes", 0))
        self._stale.clear()  # only the lines of the first read; a rewritten sample's new line counts


class Progress:
    """Emits `progress` events every `event_every` s and a log line every `log_every` s."""

    def __init__(self, out: Path, total: int, events: EventWriter, rank: int, world_size: int,
                 log: Callable[[str], None] = print, event_every: float = 2.0, log_every: float = 10.0,
                 stale: set[int] | frozenset[int] = frozenset()) -> None:
        self.tally = ManifestTally(out, total, stale)
        self.tally.refresh()
        self.events = events
        self.rank, self.world_size = rank, world_size
        self.log = log
        self.event_every, self.log_every = event_every, log_every
        self.t0 = time.monotonic()
        self.tokens0 = self.tally.tokens
        self._last_event = self._last_log = 0.0
        self._lock = threading.Lock()
        self.samples = self.tokens = self.bytes = 0  # this process's own writes

    def note_written(self, tokens: int, nbytes: int) -> None:
        with self._lock:
            self.samples += 1
            self.tokens += tokens
            self.bytes += nbytes

    def tokens_per_s(self) -> float:
        elapsed = time.monotonic() - self.t0
        return (self.tally.tokens - self.tokens0) / elapsed if elapsed > 0 else 0.0

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        due_event = force or now - self._last_event >= self.event_every
        due_log = force or now - self._last_log >= self.log_every
        if not (due_event or due_log):
            return
        self.tally.refresh()
        t = self.tally
        rate = self.tokens_per_s()
        if due_event:
            self._last_event = now
            self.events.progress(t.done, t.total, "samples", tokens=t.tokens, bytes_written=t.bytes,
                                 tokens_per_s=round(rate, 1), rank=self.rank, world_size=self.world_size)
        if due_log:
            self._last_log = now
            where = f"rank {self.rank}/{self.world_size}: " if self.world_size > 1 else ""
            self.log(f"extract: {where}{t.done}/{t.total} samples, {t.tokens:,} tokens, "
                     f"{format_bytes(t.bytes)} written, {rate:,.0f} tokens/s")
