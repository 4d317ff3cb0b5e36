"""The loader that feeds the step: DataLoader workers read the plan's micro-batches ahead,
their failures come back as one line, and the run's end never waits on them for ever.

A worker's exception used to reach the trainer as torch re-raises it (a traceback inside the
message), and the run then hung at exit holding its lock: the workers ignore SIGTERM (a stop
must end in the trainer's checkpoint, not in a dead worker torch would raise about), so the
exit handler's terminate() did nothing and its join waited for ever. Now:

- a worker catches what reading its item raised and hands back a `WorkerFailure` (the exit
  code and the line), which the trainer raises through the stage edge: exit 2 naming the file
  and the sample for bad input (a store sample that means nothing, a merged file changed under
  the run), exit 1 for anything else;
- `batches()` shuts the workers down however the loop ends: torch's own shutdown, then
  SIGKILL for any worker still there after REAP_GRACE. A worker shares the run folder's lock
  (its descriptor is inherited), so the lock goes with the last of them;
- a worker that dies (the OOM killer, a SIGKILL) ends the run with exit 1 saying so; the last
  checkpoint stands and `--resume` continues from it.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from pipeline.program_edge import BUG, StageError, leave_stops_to_parent

REAP_GRACE = 3.0
"""Seconds a worker that outlived torch's shutdown gets before SIGKILL (well inside the
console's 10 s stop grace)."""


class LoaderError(StageError):
    """A worker's failure, raised in the trainer with the code the worker's error carried."""

    def __init__(self, text: str, exit_code: int = BUG) -> None:
        super().__init__(text)
        self.exit_code = exit_code


@dataclass(frozen=True)
class WorkerFailure:
    """What a worker returns instead of a batch when reading it raised: plain data, so it
    pickles whatever the exception was."""

    exit_code: int
    text: str


class Items(Protocol):
    """A map-style dataset with a length, as the loop's StepDataset is."""

    def __len__(self) -> int: ...

    def __getitem__(self, k: int) -> Any: ...


class GuardedSteps(torch.utils.data.Dataset):
    """A dataset whose items never raise in a worker: a failure becomes a `WorkerFailure`."""

    def __init__(self, inner: Items) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, k: int) -> Any:
        try:
            return self.inner[k]
        except StageError as e:
            return WorkerFailure(int(e.exit_code), str(e))
        except Exception as e:  # noqa: BLE001 - carried to the trainer's edge as one line
            return WorkerFailure(BUG, f"{type(e).__name__}: {e} (a data-loader worker reading item {k})")


def _init_worker(pids: ctypes.Array[ctypes.c_int], worker_id: int) -> None:
    """Stops are the trainer's (it checkpoints first, then ends the workers); the pid is
    recorded so that the end can find a worker that will not go."""
    leave_stops_to_parent(signal.SIG_IGN)
    pids[worker_id] = os.getpid()


def _died(e: RuntimeError) -> bool:
    """torch's words for a worker that ended under it (its SIGCHLD handler, or the queue's watch)."""
    return str(e).startswith("DataLoader worker")


@contextmanager
def batches(dataset: Items, workers: int, prefetch: int, pin: bool) -> Iterator[Iterator]:
    """The dataset's items in order; a worker's failure raised as `LoaderError`, and every
    worker gone when the block is left."""
    pids = multiprocessing.RawArray("i", max(workers, 1))
    loader = torch.utils.data.DataLoader(
        GuardedSteps(dataset), batch_size=None, shuffle=False, num_workers=workers, pin_memory=pin,
        prefetch_factor=prefetch if workers else None,
        worker_init_fn=functools.partial(_init_worker, pids) if workers else None)
    it = iter(loader)
    try:
        yield _checked(it)
    except RuntimeError as e:
        if not _died(e):
            raise
        raise LoaderError(f"a data-loader worker ended under the trainer ({e}); the last checkpoint is kept: rerun "
                          "with --resume (lower --workers if the system ran out of memory)") from None
    finally:
        _close(it, {p for p in pids if p})


def _checked(it: Iterator) -> Iterator:
    for item in it:
        if isinstance(item, WorkerFailure):
            raise LoaderError(item.text, item.exit_code)
        yield item


def _close(it: Iterator, pids: set[int]) -> None:
    """torch's shutdown (its workers told to stop and joined), then SIGKILL for any worker of
    ours still alive after REAP_GRACE: one stuck in a read that never returns."""
    try:
        shutdown = getattr(it, "_shutdown_workers", None)  # what the iterator's __del__ calls
        if shutdown is not None:
            shutdown()
    finally:
        deadline = time.monotonic() + REAP_GRACE
        for p in multiprocessing.active_children():
            if p.pid in pids:
                p.join(max(0.0, deadline - time.monotonic()))
                if p.is_alive():
                    p.kill()
                    p.join(REAP_GRACE)
