"""The extraction loop: load batches, run the target, hand results to the writers.

Three stages overlap: a loader thread reads and pads the next batches, the main thread
runs forwards and starts the device-to-host copies, writer threads put samples on disk.
The host slot pool (buffers.py) bounds what is in flight. Before each batch the disk
guard checks that the batch plus everything still queued fits above the reserve.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pipeline.capture import Capturer, StoppedInForward
from pipeline.events import EventWriter
from pipeline.extract.batching import PlannedBatch
from pipeline.extract.buffers import BufferPool, HostSlot
from pipeline.extract.driver import RunResult, finalize_or_stop, stopped
from pipeline.extract.errors import ReserveStop
from pipeline.extract.job import Job
from pipeline.extract.progress import Progress
from pipeline.extract.reserve import disk_full, is_disk_full
from pipeline.extract.writer import HostBatch, WriterPool
from pipeline.merged_dataset import RecordReader
from pipeline.program_edge import StageError
from pipeline.sizes import format_bytes
from pipeline.store.fp8 import quantize
from pipeline.store.layout import SCALE_COLUMNS
from pipeline.store.manifest import ManifestWriter
from pipeline.store.sample_file import TORCH_DTYPES


@dataclass
class LoadedBatch:
    plan: PlannedBatch
    ids: list[str]
    input_ids: list[torch.Tensor]
    loss_mask: list[torch.Tensor]
    padded: torch.Tensor  # [B,T] int64, right-padded
    positions: list[int]


class Loader:
    """Reads and pads the batches still to do, `depth` ahead of the GPU loop."""

    _END = object()

    def __init__(self, job: Job, pin: bool, depth: int = 2) -> None:
        self.job = job
        self.pin = pin
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="extract-loader", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        reader = self.job.dataset.open()
        try:
            for plan in self.job.todo:
                if not self._put(self._load(reader, plan)):
                    return
            self._put(self._END)
        except BaseException as e:  # noqa: BLE001 - re-raised on the main thread
            self._put(e)
        finally:
            reader.close()

    def _load(self, reader: RecordReader, plan: PlannedBatch) -> LoadedBatch:
        recs = [reader.read(i) for i in plan.indices]
        padded = torch.zeros(len(recs), plan.padded_len, dtype=torch.int64)
        ids, masks = [], []
        for row, r in enumerate(recs):
            t = torch.tensor(r.input_ids, dtype=torch.int64)
            padded[row, : len(t)] = t
            ids.append(t)
            masks.append(torch.tensor(r.loss_mask, dtype=torch.uint8))
        if self.pin:
            padded = padded.pin_memory()
        return LoadedBatch(plan=plan, ids=[r.id for r in recs], input_ids=ids, loss_mask=masks,
                           padded=padded, positions=self.job.write_positions(plan))

    def __iter__(self) -> Iterator[LoadedBatch]:
        while True:
            item = self._q.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@torch.inference_mode()
def quantize_to_host(capturer: Capturer, final: torch.Tensor, aux: torch.Tensor, bad: torch.Tensor,
                     slot: HostSlot) -> tuple[tuple[torch.Tensor, ...], torch.cuda.Event | None]:
    """An fp8 store's batch: the states quantized where they were computed (pipeline/store/fp8.py),
    so the copy out and the writers move half the bytes and the writer threads spend no CPU on
    it. Returns the slot's views (slot.fp8_views) and the copy's event."""
    b, t, h = final.shape
    q_final, s_final = quantize(final.reshape(b * t, h), SCALE_COLUMNS["hidden_state"])
    q_aux, s_aux = quantize(aux.reshape(b * t, 3 * h), SCALE_COLUMNS["aux_hidden_state"])
    views = slot.fp8_views(b, t)
    sources = (q_final.view(b, t, h), q_aux.view(b, t, 3 * h), s_final.view(b, t), s_aux.view(b, t, 3), bad)
    return views, capturer.copy_out(list(zip(sources, views)))


def run(job: Job, model: Any, device: str, events: EventWriter, log: Callable[[str], None] = print,
        stop: threading.Event | None = None, compile: bool | None = None) -> RunResult:
    """Extract this rank's remaining samples; raises StageError subclasses on failure, and
    Stopped (driver.stopped) once `stop` is set.
    `compile`: torch.compile each decoder layer (None: on CUDA only; see capture.py)."""
    stop = stop or threading.Event()
    opts = job.options
    dtype = next(model.parameters()).dtype
    if TORCH_DTYPES.get(dtype) != job.dtype:
        raise StageError(f"the target is loaded as {dtype}, but the store is {job.dtype}")
    capturer = Capturer(model, job.layers, job.target.num_layers, device, compile=compile, log=log, stop=stop)
    if capturer.compiled:
        log("extract: decoder layers compiled with torch.compile on first use (the first batch takes longer; "
            "--no-compile turns it off)")
    capacity = max([opts.batch_tokens] + [b.padded_tokens for b in job.todo])
    pool = BufferPool(opts.queue, capacity, job.target.hidden_size, dtype, pin=capturer.cuda)
    progress = Progress(job.out, job.total, events, job.shard.rank, job.shard.world_size, log=log,
                        stale=set(job.damaged))
    log(f"extract: host buffers for captured batches: {opts.queue} x {format_bytes(pool.slot_bytes)}")

    def on_written(tokens: int, nbytes: int) -> None:
        progress.note_written(tokens, nbytes)
        job.guard.note_written(nbytes)

    manifest = ManifestWriter(job.out, job.shard.rank, job.shard.world_size)
    writers = WriterPool(job.out, job.target.hidden_size, manifest, pool, opts.writers, on_written,
                         captured=job.dtype)
    loader = Loader(job, pin=capturer.cuda)
    t0 = time.monotonic()
    failure: BaseException | None = None
    dropped = 0  # samples of the batch a stop cut short
    try:
        for lb in loader:
            if writers.error is not None or stop.is_set():
                break
            nbytes = {p: job.bytes_of(lb.plan.lengths[p]) for p in lb.positions}
            job.guard.check(sum(nbytes.values()) + writers.pending_bytes,
                            done=progress.tally.done, total=job.total)
            try:
                final, aux, bad = capturer.forward(lb.padded, list(lb.plan.lengths))
            except StoppedInForward:
                dropped = len(lb.positions)
                break
            except torch.cuda.OutOfMemoryError:
                raise StageError(
                    f"out of GPU memory on a batch of {len(lb.plan.indices)}x{lb.plan.padded_len} tokens; "
                    f"lower --batch-tokens (now {opts.batch_tokens}) and rerun to resume"
                ) from None
            slot = pool.acquire(abort=lambda: writers.error is not None or stop.is_set())
            if slot is None:
                break
            batch = _host_batch(lb, capturer, final, aux, bad, slot, nbytes, opts.fp8)
            del final, aux, bad
            writers.submit(batch)
            progress.tick()
    except BaseException as e:  # noqa: BLE001 - in-flight writes are drained first
        failure = e
    finally:
        failure = _close(capturer, loader, writers, manifest, job, failure)
    return _finish(job, events, progress, stop, writers.error or failure, dropped, time.monotonic() - t0)


def _host_batch(lb: LoadedBatch, capturer: Capturer, final: torch.Tensor, aux: torch.Tensor, bad: torch.Tensor,
                slot: HostSlot, nbytes: dict[int, int], fp8: bool) -> HostBatch:
    """The batch's copy into its host slot started (quantized first for an fp8 store), as the
    writers take it: they wait on its event before they read the slot."""
    h_final_scale: torch.Tensor | None
    h_aux_scale: torch.Tensor | None
    if fp8:
        (h_final, h_aux, h_final_scale, h_aux_scale, h_bad), ready = quantize_to_host(
            capturer, final, aux, bad, slot)
    else:
        ready = capturer.to_host(final, aux, bad, slot)
        h_final, h_aux, h_bad = slot.views(len(lb.plan.indices), lb.plan.padded_len)
        h_final_scale = h_aux_scale = None
    return HostBatch(plan=lb.plan, ids=lb.ids, input_ids=lb.input_ids, loss_mask=lb.loss_mask,
                     final=h_final, aux=h_aux, bad=h_bad, ready=ready,
                     positions=lb.positions, nbytes=nbytes, slot=slot,
                     final_scale=h_final_scale, aux_scale=h_aux_scale)


def _close(capturer: Capturer, loader: Loader, writers: WriterPool, manifest: ManifestWriter, job: Job,
           failure: BaseException | None) -> BaseException | None:
    """The three stages stopped and the writes in flight drained; returns the run's failure: the
    first one, else the manifest's own if it could not be closed."""
    capturer.close()
    loader.close()
    writers.close()
    try:
        manifest.close()
    except OSError as e:  # a full disk here must not hide the first failure, nor exit 1
        close_error = disk_full(e, "appending to the manifest", job.out) if is_disk_full(e) else \
            StageError(f"closing the manifest {manifest.path} failed: {e}")
        failure = failure or close_error
    return failure


def _finish(job: Job, events: EventWriter, progress: Progress, stop: threading.Event, failure: BaseException | None,
            dropped: int, seconds: float) -> RunResult:
    """The run's outcome once everything is on disk: its failure raised, Stopped when it was
    stopped, else the shard's manifest finalized and the store reported."""
    progress.tick(force=True)
    if isinstance(failure, ReserveStop):
        events.message(str(failure), level="error")
    if failure is not None:
        raise failure
    if stop.is_set():
        tally = progress.tally
        tally.refresh()
        cut = (f"; dropped the batch in flight ({dropped} samples, cut short between decoder layers)"
               if dropped else "")
        raise stopped(progress.samples, tally.done, job.total, cut)
    complete = finalize_or_stop(job.out, job.total)
    tally = progress.tally
    tally.refresh()
    if complete:
        events.artifact(str(job.out), bytes=tally.bytes, samples=tally.done, tokens=tally.tokens)
    return RunResult(samples=progress.samples, tokens=progress.tokens, bytes=progress.bytes, seconds=seconds,
                     done=tally.done, total=job.total, complete=complete)
