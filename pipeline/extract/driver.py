"""One extraction run, whichever backend computes the hidden states.

The HF engine (this process runs the target, engine.py) and the SGLang client (a patched
server computes the states and the client moves its dumps, sglang_client.py) differ only in
how the states of the samples still to do reach the store. Everything around that is here,
once, so the two cannot drift apart: the options both read, the store prepared
(job.prepare: inputs checked, meta.json, the store lock, the resume check), the samples a
resume found damaged, the start line, SIGTERM through the stage edge (the backend finishes
or drops the unit in flight, the manifest is kept: exit 143), the summary, a full disk at
any write (exit 3), and the lock released however the run ends.

A backend (`Backend`) says which dtype and shard it writes, plans its work once the store is
open (`plan`: how many samples this process still writes), and runs it (`run`), watching
the stop event the driver sets on SIGTERM.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline.extract.errors import Stopped
from pipeline.extract.job import Job, prepare
from pipeline.extract.options import Options
from pipeline.extract.reserve import disk_full, is_disk_full
from pipeline.extract.sharding import Shard
from pipeline.program_edge import on_sigterm
from pipeline.sizes import format_bytes
from pipeline.store.manifest import finalize
from pipeline.store.meta import TargetInfo

RESUME = "rerun the same command to resume"


@dataclass
class RunResult:
    samples: int  # written by this process
    tokens: int
    bytes: int
    seconds: float
    done: int  # whole run, all ranks
    total: int
    complete: bool

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def notes(self) -> str:
        """What the backend adds to the summary line."""
        return ""


class Backend(Protocol):
    dtype: str  # the store's dtype name ("bfloat16", "float32")
    shard: Shard

    def plan(self, job: Job) -> int:
        """The samples this process still writes; may refuse the plan (BadInput)."""

    def describe(self, job: Job) -> str:
        """How the work will be done, for the start line."""

    def run(self, job: Job, stop: threading.Event) -> RunResult:
        """Write the planned samples; raise `stopped(...)` once `stop` is set."""

    def close(self) -> None: ...


def finalize_or_stop(out: Path, total: int) -> bool:
    """manifest.finalize, with a full disk as the reserve stop (exit 3) it is."""
    try:
        return finalize(out, total)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(e, "writing the final manifest", out) from None
        raise


def stopped(written: int, kept: int, total: int, detail: str = "") -> Stopped:
    """The stop a backend raises once the driver's stop event is set."""
    return Stopped(f"wrote {written} samples this run; kept {kept} of {total} samples in the manifest{detail}; "
                   f"{RESUME}")


def drive(options: Options, target: TargetInfo, backend: Backend,
          log: Callable[[str], None] = lambda s: print(s, flush=True)) -> int:
    """Prepare the store, run the backend on what is left, and say how it went; 0 when this
    process's work is done."""
    try:
        job = prepare(options, target, backend.dtype, backend.shard)
        try:
            return _drive(job, backend, log)
        finally:
            if job.lock is not None:
                job.lock.release()
    finally:
        backend.close()


def _drive(job: Job, backend: Backend, log: Callable[[str], None]) -> int:
    shard = job.shard
    for index, why in sorted(job.damaged.items()):
        log(f"extract: sample {index} fails the resume check and will be extracted again: {why}")
    todo = backend.plan(job)
    tag = f"rank {shard.rank}/{shard.world_size}: " if shard.world_size > 1 else ""
    log(f"extract: {tag}{job.total} samples in the run, {len(job.done)} already in the manifest; "
        f"{backend.describe(job)}, capture layers {job.layers}, store {job.out}"
        + (" (states stored as fp8 e4m3 with per-token scales)" if job.options.fp8 else ""))
    if todo == 0:
        complete = finalize_or_stop(job.out, job.total)
        log(f"extract: {tag}nothing left to do" + ("; store complete" if complete else ""))
        return 0
    stop = threading.Event()
    with on_sigterm(lambda _signum: stop.set()):
        result = backend.run(job, stop)
    log(f"extract: {tag}wrote {result.samples} samples, {result.tokens:,} tokens, {format_bytes(result.bytes)} "
        f"in {result.seconds:.1f} s ({result.tokens_per_s:,.0f} tokens/s){result.notes()}")
    if result.complete:
        log(f"extract: store complete: {job.out} ({result.done} samples)")
    else:
        log(f"extract: {tag}share done; {result.done}/{result.total} samples in the store, it completes when "
            "the other ranks finish")
    return 0
