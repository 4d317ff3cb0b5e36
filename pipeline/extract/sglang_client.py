"""The SGLang extraction backend: a patched SGLang server computes the hidden states, this
client sends it the dataset and moves each request's dump into the store.

    python -m pipeline.extract --backend sglang --server http://127.0.0.1:30000 \\
        --dump-dir /dev/shm/sglang_hs --model TARGET --data MERGED.jsonl --out STORE

Each sample is one `POST /generate` of its token ids (max_new_tokens 1, request id KEY,
dumps.py); the patched server writes `<dump-dir>/<KEY>.safetensors` during prefill. Up to
`--concurrency` requests are in flight, and a request is sent only while the bytes its dump
will take, plus those of every dump in flight or not yet moved, fit in `--dump-budget` (the
server's EAGLE3_DUMP_BUDGET): the client holds back before the folder fills rather than
letting the server refuse. One thread carries each sample through its whole attempt, so the
retry logic lives in one place: the request and the wait for its dump (at most `--concurrency`
at a time), the dump's header and token ids checked (dumps.py: a few small preads, nothing
mapped), then the move into the store under one of `--writers` write slots (default 4): the
states stream from the dump through the slot's reused buffer of CHUNK_BYTES, each chunk checked
for NaN/Inf, checksummed and written to the store's temp file while it is in cache (one pass
over memory, no mmap, no munmap), then fsync, rename and the manifest line, through the same
write_parts, manifest and meta (pipeline/store) as the HF backend (the loss mask comes from
the dataset, never from the server). The file and manifest line are byte for byte those write_sample makes
of the same sample; a store made by either backend is the same to training. With
`--store-dtype fp8` each piece (cut on token rows) is quantized on its way through
(pipeline/store/fp8.py, quantize_stream) and the scales follow the values: the same file
write_sample makes with fp8. Then the thread
deletes the dump and gives back its bytes of the budget, which therefore bounds the bytes
waiting for a write slot. There are `--concurrency` + `--writers` such threads, so the requests
in flight keep the server busy while the store writes: the store's fsync'ing writes peak at a
few threads (bench/extract.py), far fewer than the requests a server wants in flight.

A failed attempt (HTTP error or timeout, a `.error` file, a dump that does not appear or does
not validate, up front or mid-stream: then its store temp file is removed too) is retried up
to `--retries` times; a retry that SGLang refuses as a duplicate request id (the timed-out
attempt still runs there) waits for that attempt's dump instead. `--max-failures` failed
attempts in a row (no success between them) mean the server is gone or broken: the run stops
sending, lets the requests in flight end, and exits 4. What is in the manifest stays;
rerunning the same command with a live server resumes. A signal (or a fatal error) stops the
run without moving the checked dumps still waiting for a write slot: they stay in the folder
and the rerun uses them.

The run around this (options, the store prepared, resume, SIGTERM, the summary) is the
driver's (driver.py), shared with the HF backend; `SGLangBackend` is what differs.

Exit codes (pipeline.extract's): 0 done, 1 other failure (including samples that failed
every retry while others succeeded), 2 bad input (or a server serving another model), 3
stopped by the disk reserve, 4 the server failed (unreachable at start, or --max-failures
failed attempts in a row), 130 Ctrl-C, 143 SIGTERM (the checked dumps stay for the rerun).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from pipeline.dump_protocol import dump_size_bound, key_index, request_key
from pipeline.events import EventWriter
from pipeline.extract.driver import RunResult, drive, finalize_or_stop, stopped
from pipeline.extract.dumps import STATES, BadDump, ChunkBuffer, DumpFile, DumpFolder
from pipeline.extract.errors import ReserveStop
from pipeline.extract.job import Job
from pipeline.extract.options import Options
from pipeline.extract.progress import Progress
from pipeline.extract.reserve import disk_full, is_disk_full
from pipeline.extract.sglang_http import ServerError, SGLangServer
from pipeline.extract.sharding import Shard
from pipeline.merged_dataset import Record
from pipeline.program_edge import BadInput, PeerDead, StageError
from pipeline.sizes import format_bytes
from pipeline.store.fp8 import quantize_stream
from pipeline.store.manifest import ManifestWriter
from pipeline.store.meta import TargetInfo
from pipeline.store.sample_file import write_parts

DTYPE = "bfloat16"
DUPLICATE = "Duplicate request ID"
"""SGLang's answer to a rid still in flight (managers/tokenizer_manager.py:3835 in 0.5.23)."""


class ServerFailed(PeerDead):
    """The server is unreachable or failed too many requests in a row; rerun to resume."""


class AttemptFailed(Exception):
    """One attempt at one sample failed; str() is the reason. `silent`: the server sent
    nothing back in time (hung or overloaded), as opposed to answering without a dump."""

    def __init__(self, reason: str, silent: bool = False) -> None:
        super().__init__(reason)
        self.silent = silent


def same_model(reported: str, model: Path) -> bool:
    if reported == str(model):
        return True
    return os.path.exists(reported) and os.path.realpath(reported) == os.path.realpath(model)


def check_server(server: SGLangServer, model: Path) -> str:
    """The model path the server reports, refusing a dead server or one serving another model."""
    try:
        reported = server.model_path()
    except ServerError as e:
        raise ServerFailed(f"cannot use the SGLang server: {e}; start the server phase "
                           "(python -m pipeline.serve --mode extract) and rerun") from None
    if not same_model(reported, model):
        raise BadInput(f"the server at {server.url} serves {reported!r}, not the target {str(model)!r} (--model); "
                       "restart it on the target or pass the target it serves")
    return reported


class DumpBudget:
    """Bytes of the dump folder promised to requests in flight and dumps not yet moved."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int, abort: Callable[[], bool]) -> bool:
        with self._cond:
            while self.used + n > self.limit:
                if abort():
                    return False
                self._cond.wait(0.1)
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


@dataclass
class Latencies:
    window: deque = field(default_factory=lambda: deque(maxlen=256))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seconds: float) -> None:
        with self.lock:
            self.window.append(seconds)

    def summary(self) -> tuple[float, float] | None:
        """(mean, max) in ms over the last requests, or None before the first."""
        with self.lock:
            if not self.window:
                return None
            return sum(self.window) / len(self.window) * 1000, max(self.window) * 1000


@dataclass
class SGLangResult(RunResult):
    retried: int = 0
    budget_peak: int = 0

    def notes(self) -> str:
        return f"; {self.retried} retried attempts; dump budget peak {format_bytes(self.budget_peak)}"


class Extraction:
    """One run over the samples not yet in the manifest; see the module docstring."""

    def __init__(self, job: Job, opts: Options, server: SGLangServer, events: EventWriter,
                 log: Callable[[str], None] = print, stop: threading.Event | None = None,
                 event_every: float = 2.0, log_every: float = 10.0) -> None:
        self.job, self.opts, self.server, self.events, self.log = job, opts, server, events, log
        self.stop = stop or threading.Event()
        assert opts.dump_dir is not None  # validate(): --backend sglang needs it
        self.folder = DumpFolder(opts.dump_dir)
        self.hidden = job.target.hidden_size
        self.budget = DumpBudget(opts.dump_room)
        self.latency = Latencies()
        self.progress = Progress(job.out, job.total, events, 0, 1, log=log,
                                 event_every=event_every, log_every=log_every)
        self.event_every, self.log_every = event_every, log_every
        self._lock = threading.Lock()
        self._consecutive = 0
        self._last_failure = ""
        self._silent = 0  # of the failures in a row, those where the server sent nothing back
        self.dead: str | None = None
        self.dead_silent = False  # every failure in the fatal row was the server sending nothing back
        self.fatal: BaseException | None = None
        self.failed: dict[int, str] = {}
        self.retried = 0
        self._last_metric = self._last_log = 0.0
        self._requests = threading.Semaphore(opts.concurrency)  # requests in flight
        self._slots: queue.Queue[ChunkBuffer] = queue.Queue()  # store write slots, each with its buffer
        for _ in range(opts.writers):
            self._slots.put(ChunkBuffer())

    def halted(self) -> bool:
        return self.stop.is_set() or self.dead is not None or self.fatal is not None

    def _failure(self, index: int, attempt: int, reason: str, silent: bool = False) -> bool:
        """Count a failed attempt; True when the run must stop (server dead)."""
        with self._lock:
            self._consecutive += 1
            self._silent += int(silent)
            self._last_failure = f"sample {index}, attempt {attempt}: {reason}"
            if self._consecutive >= self.opts.max_failures and self.dead is None:
                self.dead = self._last_failure
                self.dead_silent = self._silent == self._consecutive
            return self.dead is not None

    def _success(self) -> None:
        with self._lock:
            self._consecutive = 0
            self._silent = 0

    def _wait_for_dump(self, key: str, deadline: float, answered: bool = True) -> None:
        """`answered`: the server answered this attempt's request; False when it only refused it
        as a duplicate of an earlier attempt that it has not answered yet."""
        dump, error = self.folder.dump_path(key), self.folder.error_path(key)
        delay = 0.001
        while not dump.exists():
            if error.exists():
                reason = self.folder.take_error(key)
                raise AttemptFailed(f"the server refused to dump it: {reason}")
            if time.monotonic() >= deadline and not answered:
                raise AttemptFailed(
                    f"no answer from the server within {self.opts.request_timeout:g} s: it still runs an earlier "
                    "attempt of this request (it refused this one as a duplicate) and wrote no dump; the server "
                    "is hung or overloaded: see its log, or raise --request-timeout", silent=True)
            if time.monotonic() >= deadline:
                raise AttemptFailed(
                    f"the server answered but no dump appeared in {self.folder.path} within "
                    f"{self.opts.request_timeout:g} s; is it patched (pipeline.patch apply) and started with "
                    f"EAGLE3_DUMP_DIR={self.folder.path} (pipeline.serve --dump-dir)?")
            if self.stop.wait(delay):
                raise AttemptFailed("stopped by a signal")
            delay = min(delay * 2, 0.05)

    def _request(self, rec: Record, key: str) -> DumpFile:
        """The checked dump of `rec`: requested unless an earlier attempt or run left it."""
        deadline = time.monotonic() + self.opts.request_timeout
        if not self.folder.dump_path(key).exists():
            self.folder.error_path(key).unlink(missing_ok=True)
            answered = True
            try:
                self.server.generate(rec.input_ids, key)
            except ServerError as e:
                if DUPLICATE not in str(e):
                    raise AttemptFailed(str(e), silent=e.silent) from None
                answered = False  # an earlier attempt (timed out here) still runs on the server: its dump will do
            self._wait_for_dump(key, deadline, answered)
        try:
            return self.folder.open(key, rec.input_ids, self.hidden, DTYPE)
        except BadDump as e:
            raise AttemptFailed(f"rejected dump: {e}") from None
        except FileNotFoundError:
            raise AttemptFailed(f"dump {self.folder.dump_path(key)} vanished before it was read") from None

    def _attempt(self, rec: Record, key: str) -> bool:
        """One attempt: request, check, store, delete the dump. False when the run halted
        first; a dump already checked then stays in the folder for the rerun."""
        while not self._requests.acquire(timeout=0.1):
            if self.halted():
                return False
        t0 = time.monotonic()
        try:
            dump = self._request(rec, key)
        finally:
            self._requests.release()
        self.latency.add(time.monotonic() - t0)
        with dump:
            if not self._store(rec, dump):
                return False
        self.folder.discard(key)
        return True

    def _store(self, rec: Record, dump: DumpFile) -> bool:
        """Stream a checked dump into the store under a write slot; False when a signal or a
        fatal error came first."""
        while True:
            if self.stop.is_set() or self.fatal is not None:
                return False
            try:
                buf = self._slots.get(timeout=0.1)
                break
            except queue.Empty:
                continue
        try:
            t = len(rec.input_ids)
            self.job.guard.check(self.job.bytes_of(t), done=self.progress.tally.done, total=self.job.total)
            fp8 = self.job.options.fp8
            states = (quantize_stream(DTYPE, self.hidden, [(n, dump.state_chunks(n, buf, whole_rows=True))
                                                           for n in STATES]) if fp8 else dump.chunks(buf))
            parts = chain((dump.input_ids,), states, (bytes(rec.loss_mask),))
            try:
                entry = write_parts(self.job.out, rec.index, rec.id, t, self.hidden, DTYPE, parts, fp8=fp8)
                self.manifest.add(entry)
            except BadDump as e:
                raise AttemptFailed(f"rejected dump: {e}") from None
            except OSError as e:
                if is_disk_full(e):
                    raise disk_full(e, f"writing sample {rec.index}", self.job.out) from None
                raise StageError(f"writing sample {rec.index} to {self.job.out} failed: {e}") from None
        finally:
            self._slots.put(buf)
        self.progress.note_written(t, entry["bytes"])
        self.job.guard.note_written(entry["bytes"])
        return True

    def _one(self, rec: Record) -> None:
        """Carry one sample through its attempts, holding its dump's bytes of the budget until
        its dump is deleted (or left for the rerun)."""
        key = request_key(rec.index, rec.input_ids)
        size = dump_size_bound(len(rec.input_ids), self.hidden)
        if not self.budget.acquire(size, self.halted):
            return
        try:
            for attempt in range(1, self.opts.retries + 1):
                try:
                    if self._attempt(rec, key):
                        self._success()
                    return
                except AttemptFailed as e:
                    self.folder.discard(key)
                    if self.stop.is_set():
                        return
                    dead = self._failure(rec.index, attempt, str(e), e.silent)
                    if dead:
                        return
                    if attempt == self.opts.retries:
                        with self._lock:
                            self.failed[rec.index] = str(e)
                        self.log(f"extract: sample {rec.index} failed {attempt} times, giving up on it: {e}")
                        return
                    with self._lock:
                        self.retried += 1
                    self.log(f"extract: sample {rec.index} attempt {attempt} failed, retrying: {e}")
                    if self.stop.wait(min(0.05 * 2 ** attempt, 5.0)) or self.halted():
                        return
        finally:
            self.budget.release(size)

    def _worker(self, work: queue.Queue) -> None:
        while True:
            rec = work.get()
            if rec is None:
                return
            if self.halted():
                continue
            try:
                self._one(rec)
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                with self._lock:
                    if self.fatal is None:
                        self.fatal = e

    def _tick(self, force: bool = False) -> None:
        self.progress.tick(force)
        now = time.monotonic()
        if force or now - self._last_metric >= self.event_every:
            self._last_metric = now
            files, nbytes = self.folder.occupancy()
            self.events.metric("dump_folder_bytes", nbytes, files=files, budget=self.opts.dump_budget,
                               reserved=self.budget.used, path=str(self.folder.path))
            lat = self.latency.summary()
            if lat is not None:
                self.events.metric("request_latency_ms", round(lat[0], 1), max_ms=round(lat[1], 1))
            if force or now - self._last_log >= self.log_every:
                self._last_log = now
                mean = f", request latency {lat[0]:,.0f} ms (max {lat[1]:,.0f})" if lat else ""
                self.log(f"extract: dump folder {files} files, {format_bytes(nbytes)} of "
                         f"{format_bytes(self.opts.dump_budget)}{mean}")

    def run(self, todo: list[int]) -> SGLangResult:
        job = self.job
        self.manifest = ManifestWriter(job.out, 0, 1)
        work: queue.Queue = queue.Queue(maxsize=self.opts.concurrency)
        threads = [threading.Thread(target=self._worker, args=(work,), name=f"extract-sglang-{n}", daemon=True)
                   for n in range(self.opts.concurrency + self.opts.writers)]
        for th in threads:
            th.start()
        reader = job.dataset.open()
        t0 = time.monotonic()
        try:
            for i in todo:
                if self.halted():
                    break
                rec = reader.read(i)
                while not self.halted():
                    try:
                        work.put(rec, timeout=0.1)
                        break
                    except queue.Full:
                        self._tick()
                self._tick()
        finally:
            reader.close()
            for _ in threads:
                while True:
                    try:
                        work.put(None, timeout=0.1)
                        break
                    except queue.Full:
                        self._tick()
            for th in threads:
                while th.is_alive():
                    th.join(0.1)
                    self._tick()
            try:
                self.manifest.close()
            except OSError as e:  # a full disk here must not hide the first failure, nor exit 1
                with self._lock:
                    self.fatal = self.fatal or (disk_full(e, "appending to the manifest", job.out)
                                                if is_disk_full(e) else
                                                StageError(f"closing the manifest {self.manifest.path} failed: {e}"))
        seconds = time.monotonic() - t0
        self._tick(force=True)
        return self._finish(seconds)

    def _finish(self, seconds: float) -> SGLangResult:
        job, p = self.job, self.progress
        if self.fatal is not None:
            if isinstance(self.fatal, ReserveStop):
                self.events.message(str(self.fatal), level="error")
            raise self.fatal
        if self.dead is not None:
            if self.dead_silent:
                looks = (f"is silent: it answered none of them within --request-timeout {self.opts.request_timeout:g} s, "
                         "so it is hung or overloaded (not a patch problem)")
            else:
                looks = "looks dead or broken"
            msg = (f"stopped: {self.opts.max_failures} failed attempts in a row, the SGLang server at "
                   f"{self.server.url} {looks} (last: {self.dead}); {p.tally.done} of {job.total} "
                   "samples are in the store: restart the server and rerun the same command to resume")
            self.events.message(msg, level="error")
            raise ServerFailed(msg)
        if self.stop.is_set():
            p.tally.refresh()
            raise stopped(p.samples, p.tally.done, job.total)
        if self.failed:
            first = min(self.failed)
            msg = (f"{len(self.failed)} samples failed {self.opts.retries} attempts each (first: sample {first}: "
                   f"{self.failed[first]}); the other {p.tally.done} of {job.total} are in the store: "
                   "fix the cause and rerun the same command to retry them")
            self.events.message(msg, level="error")
            raise StageError(msg)
        complete = finalize_or_stop(job.out, job.total)
        self.folder.sweep(keep=set())
        tally = p.tally
        tally.refresh()
        if complete:
            self.events.artifact(str(job.out), bytes=tally.bytes, samples=tally.done, tokens=tally.tokens)
        return SGLangResult(samples=p.samples, tokens=p.tokens, bytes=p.bytes, seconds=seconds, done=tally.done,
                            total=job.total, complete=complete, retried=self.retried,
                            budget_peak=self.budget.peak)


def plan(job: Job, opts: Options) -> list[int]:
    """The indices still to do; refuses a sample whose dump could never fit the budget."""
    todo = []
    for i in range(job.total):
        if i in job.done:
            continue
        t = job.dataset.lengths[i]
        need = dump_size_bound(t, job.target.hidden_size)
        if need > opts.dump_room:
            raise BadInput(f"sample {i} has {t} tokens, whose dump takes about {format_bytes(need)}, more than "
                           f"the dump budget of {format_bytes(opts.dump_budget)} (--dump-budget); raise the "
                           "budget on the server and here, or merge with a lower --max-len")
        todo.append(i)
    return todo


def leftover_keys(job: Job, folder: DumpFolder, todo: list[int]) -> set[str]:
    """Keys of the dumps a killed run left that are still useful: samples still to do,
    whose key matches this dataset's record (only those few records are read)."""
    pending = set(todo)
    keys = set()
    reader = job.dataset.open()
    try:
        for key in folder.dump_keys():
            index = key_index(key)
            if index is not None and index in pending and request_key(index, reader.read(index).input_ids) == key:
                keys.add(key)
    finally:
        reader.close()
    return keys


def extract(opts: Options) -> int:
    """`pipeline.extract --backend sglang`: the validated options run by the driver; raises the
    stage edge's errors, returns 0 when this run's work is done."""
    assert opts.model is not None and opts.server is not None  # validate(): --backend sglang needs them
    target = TargetInfo.from_dir(opts.model)
    try:
        server = SGLangServer(opts.server, timeout=opts.request_timeout)
    except ValueError as e:
        raise BadInput(f"--server: {e}") from None
    try:
        reported = check_server(SGLangServer(opts.server, timeout=min(opts.request_timeout, 30.0)), opts.model)
    except BaseException:
        server.close()
        raise
    return drive(opts, target, SGLangBackend(opts, server, reported))


class SGLangBackend:
    """The driver's backend that has a patched SGLang server compute the states
    (driver.Backend): one process, the whole run, the states in bf16 (stored so, or as fp8 with --store-dtype fp8)."""

    dtype = DTYPE
    shard = Shard(0, 1)

    def __init__(self, opts: Options, server: SGLangServer, reported: str,
                 log: Callable[[str], None] = lambda s: print(s, flush=True)) -> None:
        self.opts, self.server, self.reported, self.log = opts, server, reported, log
        assert opts.dump_dir is not None  # validate(): --backend sglang needs it
        self.folder = DumpFolder(opts.dump_dir)
        self.todo: list[int] = []
        self.swept = (0, 0)

    def plan(self, job: Job) -> int:
        try:
            self.folder.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"cannot create the dump folder {self.folder.path} (--dump-dir): {e.strerror}") from None
        self.todo = plan(job, self.opts)
        self.swept = self.folder.sweep(keep=leftover_keys(job, self.folder, self.todo))
        return len(self.todo)

    def describe(self, job: Job) -> str:
        opts, (swept, swept_bytes) = self.opts, self.swept
        return (f"{len(self.todo)} to send to {self.server.url} (serving {self.reported}), {opts.concurrency} at a "
                f"time, {opts.writers} store writers; dump folder {self.folder.path} (budget "
                f"{format_bytes(opts.dump_budget)})"
                + (f"; removed {swept} stale dump files ({format_bytes(swept_bytes)})" if swept else ""))

    def run(self, job: Job, stop: threading.Event) -> SGLangResult:
        return Extraction(job, self.opts, self.server, EventWriter.from_env(), log=self.log, stop=stop).run(self.todo)

    def close(self) -> None:
        self.server.close()
