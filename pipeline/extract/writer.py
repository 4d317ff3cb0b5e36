"""Writer threads: take captured batches off the GPU loop and put samples on disk.

Disk writes (with fsync) take about as long as the forward pass, so they run on N
threads beside it; file writes and fsync release the GIL. An fp8 store's states come
quantized already (engine.py does it on the device), with their scales. The job queue needs no bound of
its own: every job points into a host slot, and the slot pool (buffers.py) is bounded.
A writer error stops the run: remaining jobs are drained without writing, so slots come
back and the GPU loop can see the error and stop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.extract.batching import PlannedBatch
from pipeline.extract.buffers import BufferPool, HostSlot
from pipeline.extract.reserve import disk_full, is_disk_full
from pipeline.program_edge import StageError
from pipeline.store.manifest import ManifestWriter
from pipeline.store.sample_file import Sample, write_sample


@dataclass
class HostBatch:
    plan: PlannedBatch
    ids: list[str]
    input_ids: list[torch.Tensor]
    loss_mask: list[torch.Tensor]
    final: torch.Tensor  # [B,T,H] host (e4m3 for an fp8 store)
    aux: torch.Tensor  # [B,T,3H] host
    bad: torch.Tensor  # [B] host
    ready: torch.cuda.Event | None
    positions: list[int]
    nbytes: dict[int, int]  # position -> exact file size
    slot: HostSlot
    remaining: int = 0
    waited: bool = False
    final_scale: torch.Tensor | None = None  # [B,T] float32, fp8 store only
    aux_scale: torch.Tensor | None = None  # [B,T,3] float32


class WriterPool:
    def __init__(self, out: Path, hidden: int, manifest: ManifestWriter, pool: BufferPool, threads: int,
                 on_written: Callable[[int, int], None], captured: str | None = None) -> None:
        self.out = Path(out)
        self.captured = captured  # the dtype the states were captured in, for fp8 files' metadata
        self.hidden = hidden
        self.manifest = manifest
        self.pool = pool
        self.on_written = on_written
        self.error: BaseException | None = None
        self._jobs: queue.Queue[tuple[HostBatch, int] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pending_bytes = 0
        self._threads = [threading.Thread(target=self._loop, name=f"extract-writer-{n}", daemon=True)
                         for n in range(threads)]
        for t in self._threads:
            t.start()

    @property
    def pending_bytes(self) -> int:
        with self._lock:
            return self._pending_bytes

    def submit(self, batch: HostBatch) -> None:
        batch.remaining = len(batch.positions)
        with self._lock:
            self._pending_bytes += sum(batch.nbytes.values())
        for p in batch.positions:
            self._jobs.put((batch, p))

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join()

    def _fail(self, e: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = e

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch, p = job
            try:
                if self.error is None:
                    self._write(batch, p)
            except OSError as e:
                if is_disk_full(e):
                    self._fail(disk_full(e, f"writing sample {batch.plan.indices[p]}", self.out))
                else:
                    self._fail(StageError(f"writing sample {batch.plan.indices[p]} to {self.out} failed: {e}"))
            except BaseException as e:  # noqa: BLE001 - handed to the main loop
                self._fail(e)
            finally:
                self._done_one(batch, p)

    def _done_one(self, batch: HostBatch, p: int) -> None:
        with self._lock:
            self._pending_bytes -= batch.nbytes[p]
            batch.remaining -= 1
            last = batch.remaining == 0
        if last:
            self.pool.release(batch.slot)

    def _write(self, batch: HostBatch, p: int) -> None:
        if batch.ready is not None and not batch.waited:
            batch.ready.synchronize()
            batch.waited = True
        index = batch.plan.indices[p]
        t = batch.plan.lengths[p]
        sample = Sample(
            index=index,
            id=batch.ids[p],
            input_ids=batch.input_ids[p],
            loss_mask=batch.loss_mask[p],
            hidden_state=batch.final[p, :t],
            aux_hidden_state=batch.aux[p, :t],
            hidden_state_scale=None if batch.final_scale is None else batch.final_scale[p, :t],
            aux_hidden_state_scale=None if batch.aux_scale is None else batch.aux_scale[p, :t],
        )
        entry = write_sample(self.out, sample, self.hidden, finite=not bool(batch.bad[p]), captured=self.captured)
        self.manifest.add(entry)
        self.on_written(t, entry["bytes"])
