"""The manifest: the only record of which samples are finished.

A sample counts as done when its line is in the manifest, never because its file exists
(a file can be left by a run killed between rename and manifest append; it is rewritten).
Lines are appended only after the sample's rename and its directory are fsynced, in
batches, so a line never names a file a power cut could lose. A torn last line (a kill
mid-append) is ignored by readers and cut off before the next append.

Sharding: rank r of a W-rank run appends to its own part, `manifest.rank<r>.jsonl` (a
one-rank run appends to `manifest.jsonl` directly), so ranks never contend on one file.
Readers call `read_manifest(out)`, which takes the union of `manifest.jsonl` and every
part. When a rank finishes and the union covers every sample of the run, it writes the
union, sorted by index, as `manifest.jsonl` (temp + rename, under a lock) and deletes
the parts: a finished store is one `manifest.jsonl`, whatever the world size was.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

from pipeline.atomic_io import TEMP_SUFFIX, fsync_dir, write_bytes_atomic

MANIFEST = "manifest.jsonl"
LOCK = ".manifest.lock"


def part_path(out: Path, rank: int, world_size: int) -> Path:
    return out / (MANIFEST if world_size == 1 else f"manifest.rank{rank}.jsonl")


def manifest_files(out: Path) -> list[Path]:
    parts = sorted(out.glob("manifest.rank*.jsonl"))
    main = out / MANIFEST
    return ([main] if main.exists() else []) + parts


def parse_entries(data: bytes) -> list[dict]:
    """Entries of the complete lines of `data`; a torn or foreign line is skipped."""
    entries = []
    for line in data.split(b"\n")[:-1] if data else []:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("index"), int):
            entries.append(e)
    return entries


def read_manifest(out: Path) -> dict[int, dict]:
    """Every finished sample of the store at `out`, by index (all ranks' parts included), in
    the order written (main manifest, then each rank's part); a later line for an index
    replaces an earlier one and takes its place in that order."""
    done: dict[int, dict] = {}
    for path in manifest_files(Path(out)):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        for e in parse_entries(data):
            done.pop(e["index"], None)
            done[e["index"]] = e
    return done


def manifest_in_order(out: Path) -> list[dict]:
    """read_manifest's entries as a list, last written last (resume checks those first)."""
    return list(read_manifest(out).values())


def entry_line(entry: dict) -> bytes:
    return (json.dumps(entry, separators=(",", ":")) + "\n").encode()


class ManifestWriter:
    """Appends this rank's finished samples; thread-safe, fsynced every `flush_every`
    entries or `flush_secs` seconds, and on close."""

    def __init__(self, out: Path, rank: int, world_size: int, flush_every: int = 32, flush_secs: float = 0.5) -> None:
        self.out = Path(out)
        self.path = part_path(self.out, rank, world_size)
        self._cut_torn_tail()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._dirs: set[Path] = set()
        self._flush_every = flush_every
        self._flush_secs = flush_secs
        self._last = time.monotonic()

    def _cut_torn_tail(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
                os.fsync(f.fileno())

    def add(self, entry: dict) -> None:
        with self._lock:
            self._pending.append(entry_line(entry))
            self._dirs.add((self.out / entry["file"]).parent)
            if len(self._pending) >= self._flush_every or time.monotonic() - self._last >= self._flush_secs:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last = time.monotonic()
        if not self._pending:
            return
        for d in sorted(self._dirs):
            fsync_dir(d)
        fsync_dir(self.out)
        os.write(self._fd, b"".join(self._pending))
        os.fsync(self._fd)
        self._pending.clear()
        self._dirs.clear()

    def close(self) -> None:
        if self._fd < 0:
            return
        self.flush()
        os.close(self._fd)
        self._fd = -1


def finalize(out: Path, total: int) -> bool:
    """If every index below `total` is done, make `manifest.jsonl` the sorted union, drop
    the parts and stale temp files, and return True; otherwise leave all as is."""
    out = Path(out)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = read_manifest(out)
        if any(i not in done for i in range(total)):
            return False
        data = b"".join(entry_line(done[i]) for i in sorted(done))
        write_bytes_atomic(out / MANIFEST, data)
        for part in out.glob("manifest.rank*.jsonl"):
            part.unlink(missing_ok=True)
        for tmp in out.glob(f"rows_*/.*{TEMP_SUFFIX}"):
            tmp.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)
