"""The parent's side of tokenizing: the tokenizer checked before any work starts, chunks handed
to worker processes (chunks.py is their side) a few at a time, and the progress they make."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from pipeline.chat.loss_mask import default_method
from pipeline.chat.sources import SourceReport
from pipeline.events import EventWriter
from pipeline.merge.chunks import Chunk, ChunkResult, EncodeSettings, encode_chunk, init_worker, load_tokenizer
from pipeline.merge.reading import Source
from pipeline.program_edge import BadInput


def check_tokenizer(path: str) -> tuple[Any, str]:
    if not Path(path).exists():
        raise BadInput(f"--tokenizer {path} does not exist; pass the tokenizer or target model folder")
    try:
        tokenizer = load_tokenizer(path)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the same operator error
        raise BadInput(f"--tokenizer {path}: cannot load a tokenizer from it ({type(exc).__name__}: {exc})") from None
    if not isinstance(getattr(tokenizer, "chat_template", None), str) or not tokenizer.chat_template:
        raise BadInput(f"--tokenizer {path} has no chat_template; merge renders every record with it")
    method = default_method(tokenizer)
    if not getattr(tokenizer, "is_fast", False):
        raise BadInput(f"--tokenizer {path} is a slow tokenizer; loss masks need a fast one (tokenizer.json)")
    return tokenizer, method


class Progress:
    """Progress lines on stdout (every few seconds) and events (a few per second). The total
    is not known before the sources are read (an array is counted only by reading it), so it
    is estimated from the bytes read so far and exact at the end."""

    def __init__(self, sources: list[Source], reports: dict[str, SourceReport], events: EventWriter) -> None:
        self.events = events
        self._reports = reports
        self._bytes = max(sum(s.path.stat().st_size for s in sources), 1)
        self.total = 0
        self.done = 0
        self.started = time.monotonic()
        self._printed = self._emitted = 0.0
        self._last: tuple[int, int] = (-1, -1)  # done at the last event, at the last line

    def _estimate(self, final: bool) -> int:
        usable = sum(r.usable for r in self._reports.values())
        if final:
            return usable
        read = sum(r.bytes_read for r in self._reports.values())
        guess = round(usable * self._bytes / read) if read else 0
        return max(guess, usable, self.done)

    def add(self, n: int, final: bool = False) -> None:
        self.done += n
        self.total = self._estimate(final)
        now = time.monotonic()
        if (final and self._last[0] != self.done) or now - self._emitted >= 0.25:
            self.events.progress(self.done, self.total, unit="samples", stage="tokenize")
            self._emitted, self._last = now, (self.done, self._last[1])
        if (final and self._last[1] != self.done) or now - self._printed >= 2.0:
            rate = self.done / max(now - self.started, 1e-9)
            print(f"merge: tokenized {self.done}/{self.total} samples ({rate:.0f}/s)", flush=True)
            self._printed, self._last = now, (self._last[0], self.done)


def run_chunks(
    chunks: Iterator[Chunk], settings: EncodeSettings, tokenizer: Any, workers: int, progress: Progress
) -> list[ChunkResult]:
    """Tokenizes chunks as the reader yields them, at most 2 x workers in flight (memory holds
    a few chunks, never the dataset); results in chunk order."""
    results: dict[int, ChunkResult] = {}
    if workers <= 1:
        init_worker(settings, tokenizer)
        for chunk in chunks:
            res = encode_chunk(chunk)
            results[chunk.index] = res
            if res.error is not None:
                raise res.error
            progress.add(res.counts.read)
        return [results[i] for i in sorted(results)]
    # fork hands every worker the loaded tokenizer at no cost; it is safe here because the
    # parent has not yet run tokenizers' thread pool (a spawned worker would spend seconds
    # importing transformers).
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    initargs = (settings, tokenizer if ctx.get_start_method() == "fork" else None, True)
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=init_worker, initargs=initargs)
    try:
        pending: set = set()
        failed = False
        more = True
        while True:
            while more and not failed and len(pending) < 2 * workers:
                due = next(chunks, None)
                if due is None:
                    more = False
                else:
                    pending.add(pool.submit(encode_chunk, due))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                res = fut.result()
                results[res.index] = res
                progress.add(res.counts.read)
                failed = failed or res.error is not None
            # after a failure the chunks in flight still finish, so the earliest error is reported
    except BaseException as exc:
        # stopped or failed: kill the workers now instead of waiting for their chunks
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)  # none may still write into the parts folder as it goes
            if proc.is_alive():
                proc.kill()
                proc.join()
        # the pool's manager thread is joined here: left running, it raced the interpreter's exit,
        # which printed an OSError traceback under the stage's last line
        pool.shutdown(wait=True, cancel_futures=True)
        if isinstance(exc, BrokenProcessPool):
            raise RuntimeError(  # noqa: TRY004 - a failure to report, not a type check
                "a tokenizer worker died (killed by a memory limit or the OOM killer?); "
                "rerun with fewer --workers or a lower --max-len"
            ) from None
        raise
    pool.shutdown(wait=True, cancel_futures=True)
    ordered = [results[i] for i in sorted(results)]
    errors = [r.error for r in ordered if r.error is not None]
    if errors:
        raise errors[0]  # the earliest chunk's, so the message does not depend on timing
    return ordered
