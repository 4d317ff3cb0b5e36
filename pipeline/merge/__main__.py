"""Merge chat datasets into one shuffled, tokenized training set with assistant-only masks.

    python -m pipeline.merge --tokenizer PATH --out OUT.jsonl [--stats STATS.json]
        [--max-len 512] [--on-long truncate|drop] [--seed 0] [--include SRC ...]
        [--exclude SRC ...] [--workers N] [--strict] [--max-invalid SHARE]
        [--role-map NAME=ROLE,...] [--on-assistant-first keep|drop] [--same-role join|drop]
        SOURCE.jsonl|SOURCE.json|DIR ...

Each record is rendered with the target's own chat template (the drafter must see exactly
the token stream the target serves), masked to the assistant's text, and cut or dropped
at --max-len. Tokenizing runs in worker processes over fixed chunks; the shuffle uses only
the seed and the input order, so the output is byte-identical for any --workers. Output
and stats are written to temporary names and renamed; the stats carry the dataset's
sha256, so a kill between the two renames (new dataset, old stats) is caught by a verify
that compares them (and the old stats are removed first, so it can only read as missing).
Temporary files of a merge that was killed are removed by the next run; SIGTERM removes
its own.

Sources are read by `pipeline.chat.sources` (JSON lines or a streamed JSON array, in the
shapes `pipeline.chat.records` accepts): an unusable record is skipped and counted by reason,
a source past --max-invalid stops the merge, --strict stops at the first bad record. The
parent reads; workers tokenize chunks of records. A record with more text than --max-len
tokens could hold is dropped (or cut) before tokenizing, and a line over the line bound
is skipped unread; both are counted and reported.

Exit codes: 0 ok, 2 bad arguments or input (one line naming file, line and field, or the
source and its share of unusable records), 1 any other failure, 130 interrupted, 143
stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import random
import shutil
import signal
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import output_guard
from pipeline.atomic_io import fsync_dir, write_json_atomic
from pipeline.chat.records import ChatRecord
from pipeline.chat.sources import (
    DEFAULT_ROLE_MAP,
    SourcePolicy,
    SourceReport,
    format_role_map,
    iter_records,
    parse_role_map,
    source_files,
)
from pipeline.events import EventWriter
from pipeline.chat.loss_mask import default_method
from pipeline.merge.chunks import (
    Chunk,
    ChunkResult,
    EncodeSettings,
    SourceCounts,
    char_bound,
    encode_chunk,
    init_worker,
    line_bound,
    load_tokenizer,
)
from pipeline.process_alive import pid_alive
from pipeline.program_edge import BadInput, StageError, on_sigterm, run_program

CHUNK_RECORDS = 256
STATS_KEYS = ("dataset_sha256", "sources")  # what makes a stats file merge's own
CHUNK_CHARS = 16 * 2**20
"""A chunk closes at this many records or characters of content, whichever comes first."""


@dataclass(frozen=True)
class MergeOptions:
    """What a merge was asked for: the command line's flags, checked by `merge`."""

    tokenizer: str
    out: Path
    sources: list[str] = field(default_factory=list)
    stats: Path | None = None
    max_len: int = 512
    on_long: str = "truncate"
    max_line_bytes: int | None = None
    seed: int = 0
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    workers: int = 1
    strict: bool = False
    max_invalid: float = 0.05
    role_map: str = format_role_map(DEFAULT_ROLE_MAP)
    on_assistant_first: str = "keep"
    same_role: str = "join"


@dataclass(frozen=True)
class Source:
    name: str
    path: Path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.merge",
        description="Merge chat JSONL sources into one shuffled training set: token ids plus an "
        "assistant-only loss mask per record, rendered with the target's chat template.",
        epilog="A source's name is its file stem; a DIR stands for every *.jsonl and *.json in it. A file "
        "that starts with '[' is read as a JSON array, element by element. Give sources "
        "before --include/--exclude, or end those lists with --.",
    )
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="chat JSONL or JSON-array files, or folders of them")
    p.add_argument("--tokenizer", required=True, metavar="PATH", help="tokenizer folder, or the target model folder")
    p.add_argument("--out", required=True, type=Path, metavar="OUT.jsonl", help="merged dataset to write")
    p.add_argument("--stats", type=Path, metavar="STATS.json", help="stats file (default: <out stem>.stats.json next to --out)")
    p.add_argument("--max-len", type=int, default=512, metavar="N", help="longest record in tokens (default 512)")
    p.add_argument(
        "--on-long",
        choices=("truncate", "drop"),
        default="truncate",
        help="what to do with a record longer than --max-len (default truncate)",
    )
    p.add_argument(
        "--max-line-bytes",
        type=int,
        default=None,
        metavar="N",
        help="skip input lines longer than this unread (default: 8 bytes per character --max-len could keep, "
        "at least 16 MiB)",
    )
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    p.add_argument("--include", nargs="+", action="extend", default=[], metavar="SRC", help="keep only these sources")
    p.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="SRC", help="leave these sources out")
    p.add_argument(
        "--workers",
        type=int,
        default=min(os.cpu_count() or 1, 8),
        metavar="N",
        help="tokenizer processes (default: CPU count, at most 8); output does not depend on it",
    )
    p.add_argument("--strict", action="store_true", help="stop (exit 2) at the first unusable record instead of skipping it")
    p.add_argument(
        "--max-invalid",
        type=float,
        default=0.05,
        metavar="SHARE",
        help="largest share of a source's records that may be unusable (default 0.05); past it, exit 2: "
        "a mostly-bad file is probably the wrong file",
    )
    p.add_argument(
        "--role-map",
        default=format_role_map(DEFAULT_ROLE_MAP),
        metavar="NAME=ROLE,...",
        help=f"extra speaker names and the role each stands for (default {format_role_map(DEFAULT_ROLE_MAP)}, "
        "ShareGPT's extra roles; giving it replaces the default, '' maps none)",
    )
    p.add_argument(
        "--on-assistant-first",
        choices=("keep", "drop"),
        default="keep",
        help="records that open with an assistant turn (ShareGPT continuation chunks): keep (default; only "
        "assistant text is learnt) or drop; counted either way",
    )
    p.add_argument(
        "--same-role",
        choices=("join", "drop"),
        default="join",
        help="consecutive turns of one role: join them into one turn (default) or drop the record; counted either way",
    )
    return p


def source_policy(opts: MergeOptions, max_record_bytes: int) -> SourcePolicy:
    if not 0.0 <= opts.max_invalid <= 1.0:
        raise BadInput(f"--max-invalid must be a share between 0 and 1 (0.05 is 5%), got {opts.max_invalid}")
    role_map = parse_role_map(opts.role_map)
    return SourcePolicy(
        strict=opts.strict,
        max_invalid=opts.max_invalid,
        role_map=role_map,
        on_assistant_first=opts.on_assistant_first,
        same_role=opts.same_role,
        max_record_bytes=max_record_bytes,
    )


def resolve_sources(args: list[str], include: list[str], exclude: list[str]) -> list[Source]:
    found: list[Source] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            files = source_files(path)
            if not files:
                raise BadInput(f"source folder {arg} holds no *.jsonl or *.json files")
            found += [Source(f.stem, f) for f in files]
        elif path.is_file():
            found.append(Source(path.stem, path))
        else:
            raise BadInput(f"source {arg} does not exist; pass a .jsonl or .json file or a folder of them")
    seen: dict[str, Path] = {}
    for src in found:
        if src.name in seen:
            raise BadInput(f"two sources are named '{src.name}': {seen[src.name]} and {src.path}; rename one")
        seen[src.name] = src.path
    names = ", ".join(seen) or "none"
    for flag, wanted in (("--include", include), ("--exclude", exclude)):
        unknown = [w for w in wanted if w not in seen]
        if unknown:
            raise BadInput(f"{flag} names unknown source '{unknown[0]}'; the sources are: {names}")
    if include:
        found = [s for s in found if s.name in include]
    found = [s for s in found if s.name not in exclude]
    if not found:
        raise BadInput(f"no sources left after --include/--exclude (sources: {names})")
    return found


def _content_chars(rec: ChatRecord) -> int:
    return sum(len(m["content"]) for m in rec.conversations)


def read_chunks(sources: list[Source], policy: SourcePolicy, reports: dict[str, SourceReport]) -> Iterator[Chunk]:
    """Every usable record, in source order, in chunks of at most CHUNK_RECORDS records or
    CHUNK_CHARS characters; a chunk never spans two sources."""
    index = 0
    for src in sources:
        batch: list[ChatRecord] = []
        chars = 0
        for rec in iter_records(src.path, src.name, policy, reports[src.name]):
            batch.append(rec)
            chars += _content_chars(rec)
            if len(batch) >= CHUNK_RECORDS or chars >= CHUNK_CHARS:
                yield Chunk(index, src.name, str(src.path), tuple(batch))
                index += 1
                batch, chars = [], 0
        if batch:
            yield Chunk(index, src.name, str(src.path), tuple(batch))
            index += 1


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


class _Progress:
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


def _run_chunks(
    chunks: Iterator[Chunk], settings: EncodeSettings, tokenizer: Any, workers: int, progress: _Progress
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
                chunk = next(chunks, None)
                if chunk is None:
                    more = False
                else:
                    pending.add(pool.submit(encode_chunk, chunk))
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
        pool.shutdown(wait=False, cancel_futures=True)
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


class _PartReader:
    """Random reads from many part files with a bounded number of open descriptors."""

    def __init__(self, limit: int = 128) -> None:
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._limit = limit

    def read(self, path: str, offset: int, length: int) -> bytes:
        fd = self._fds.pop(path, None)
        if fd is None:
            if len(self._fds) >= self._limit:
                os.close(self._fds.popitem(last=False)[1])
            fd = os.open(path, os.O_RDONLY)
        self._fds[path] = fd
        return os.pread(fd, length, offset)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _shuffled_entries(results: list[ChunkResult], seed: int) -> list[tuple[str, int, int]]:
    entries = [(r.part, off, n) for r in results for off, n in r.entries]
    random.Random(seed).shuffle(entries)
    return entries


def _write_merged(out: Path, entries: list[tuple[str, int, int]], stats_path: Path) -> str:
    """Writes the dataset and returns its sha256. The old stats go first: a kill before
    the new stats land leaves a dataset without stats, never one with the wrong ones."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    digest = hashlib.sha256()
    reader = _PartReader()
    try:
        with os.fdopen(output_guard.open_output(tmp, create=True), "wb") as f:  # never through a planted link
            for part, off, n in entries:
                blob = reader.read(part, off, n)
                digest.update(blob)
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        stats_path.unlink(missing_ok=True)
        fsync_dir(stats_path.parent)  # the old stats are gone for good before the new dataset lands
        os.replace(tmp, out)
        fsync_dir(out.parent)
    finally:
        reader.close()
        if tmp.exists():
            tmp.unlink()
    return digest.hexdigest()


def default_stats_path(out: Path) -> Path:
    return out.with_name(f"{out.stem}.stats.json")


def remove_stale_leftovers(out: Path) -> list[Path]:
    """Part folders and temporary datasets of merges into `out` whose process is gone
    (a SIGKILL, an OOM kill, a lost machine): they are named for their pid."""
    removed: list[Path] = []
    for pattern in (f".{out.name}.parts-*", f".{out.name}.tmp-*"):
        for path in out.parent.glob(pattern):
            pid = path.name.rsplit("-", 1)[-1]
            if not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _shape_of(shapes: dict[str, int]) -> str:
    if not shapes:
        return "none"
    return next(iter(shapes)) if len(shapes) == 1 else "mixed"


def _report_drops(
    name: str,
    c: SourceCounts,
    report: SourceReport,
    examples: list[str],
    oversize: list[str],
    opts: MergeOptions,
    bounds: tuple[int, int],
    events: EventWriter,
) -> None:
    max_chars, max_line = bounds
    notes: list[str] = []
    for note in report.warnings():
        if note.startswith(f"{c.lines_too_long} lines longer than"):
            note += "; raise --max-line-bytes to read them"
        notes.append(note)
    if c.over_char_bound:
        how = "dropped" if opts.on_long == "drop" else "cut to that many characters"
        shown = ", ".join(oversize)
        notes.append(
            f"{c.over_char_bound} samples hold more text than --max-len {opts.max_len} tokens could ever keep "
            f"(over {max_chars} characters): {how} before tokenizing (e.g. {shown})"
        )
    long_dropped = c.dropped_too_long - c.lines_too_long
    if long_dropped:
        how = "dropped" if opts.on_long == "drop" else "dropped (no assistant tokens left after truncation)"
        notes.append(f"{long_dropped} of {c.read} samples longer than --max-len {opts.max_len} {how}")
    if c.dropped_empty_mask:
        notes.append(
            f"{c.dropped_empty_mask} samples have no assistant tokens to learn, dropped (e.g. {', '.join(examples)})"
        )
    if c.read and not c.records:
        notes.append("the source contributes no records")
    for note in notes:
        print(f"merge: warning: {name}: {note}", flush=True)
        events.message(f"{name}: {note}", level="warning", source=name)


def merge(opts: MergeOptions, events: EventWriter) -> dict:
    if opts.max_len < 1:
        raise BadInput(f"--max-len must be at least 1, got {opts.max_len}")
    if opts.workers < 1:
        raise BadInput(f"--workers must be at least 1, got {opts.workers}")
    if opts.max_line_bytes is not None and opts.max_line_bytes < 2:
        raise BadInput(f"--max-line-bytes must be at least 2, got {opts.max_line_bytes}")
    if not opts.sources:
        trailing = (opts.include or opts.exclude or [None])[-1]
        hint = ""
        if trailing is not None and Path(trailing).exists():
            hint = f" ('{trailing}' was read as a source name: put sources before --include/--exclude or end them with --)"
        raise BadInput(f"no SOURCE given{hint}")
    sources = resolve_sources(opts.sources, opts.include, opts.exclude)
    tokenizer, method = check_tokenizer(opts.tokenizer)
    out: Path = opts.out
    stats_path: Path = opts.stats or default_stats_path(out)
    if out.is_dir():
        raise BadInput(f"--out {out} is a folder; pass a file path such as {out / 'train.jsonl'}")
    inputs = [Path(a) for a in opts.sources] + [Path(opts.tokenizer)]
    output_guard.refuse_overlap(out, inputs)
    output_guard.refuse_overlap(stats_path, inputs, "--stats")
    output_guard.refuse_foreign_file(out, stats_path, STATS_KEYS, "merge")
    output_guard.refuse_foreign_stats(stats_path, STATS_KEYS, "merge")
    out.parent.mkdir(parents=True, exist_ok=True)
    stats_path.parent.mkdir(parents=True, exist_ok=True)
    stale = remove_stale_leftovers(out)
    if stale:
        print(f"merge: removed {len(stale)} leftovers of killed merges ({', '.join(p.name for p in stale[:3])})", flush=True)
    max_chars = char_bound(tokenizer, opts.max_len)
    max_line = opts.max_line_bytes or line_bound(max_chars)

    workers = opts.workers
    print(
        f"merge: {len(sources)} source{'s' if len(sources) != 1 else ''} ({', '.join(s.name for s in sources)}), max-len {opts.max_len}, "
        f"on-long {opts.on_long}, mask {method}, {workers} worker{'s' if workers != 1 else ''}",
        flush=True,
    )
    policy = source_policy(opts, max_line)
    reports = {s.name: SourceReport(s.name) for s in sources}
    progress = _Progress(sources, reports, events)
    events.progress(0, 0, unit="samples", stage="tokenize")

    parts_dir = out.with_name(f".{out.name}.parts-{os.getpid()}")
    if parts_dir.exists():
        shutil.rmtree(parts_dir)
    parts_dir.mkdir()
    try:
        settings = EncodeSettings(
            opts.tokenizer, method, opts.max_len, opts.on_long, str(parts_dir), max_chars, max_line
        )
        results = _run_chunks(read_chunks(sources, policy, reports), settings, tokenizer, workers, progress)
        progress.add(0, final=True)

        per_source: dict[str, SourceCounts] = {s.name: SourceCounts() for s in sources}
        examples: dict[str, list[str]] = {s.name: [] for s in sources}
        oversize: dict[str, list[str]] = {s.name: [] for s in sources}
        shapes: dict[str, dict[str, int]] = {s.name: {} for s in sources}
        for res in results:
            per_source[res.source].add(res.counts)
            examples[res.source] += res.empty_examples
            oversize[res.source] += res.oversize_examples
            for shape, n in res.shapes.items():
                shapes[res.source][shape] = shapes[res.source].get(shape, 0) + n
        for name, c in per_source.items():
            report = reports[name]
            c.read = report.records
            c.lines_too_long = report.lines_too_long
            c.dropped_too_long += report.lines_too_long
            _report_drops(name, c, report, examples[name][:3], oversize[name][:3], opts, (max_chars, max_line), events)

        kept = sum(c.records for c in per_source.values())
        if kept == 0:
            too_long = sum(c.dropped_too_long for c in per_source.values())
            empty = sum(c.dropped_empty_mask for c in per_source.values())
            skipped = sum(r.records - r.usable - r.lines_too_long for r in reports.values())
            raise BadInput(
                f"every sample was dropped ({too_long} too long, {empty} with no assistant tokens, {skipped} "
                f"skipped or left out by the reader); nothing written to {out}. Raise --max-len or use --on-long truncate"
            )
        # again, just before replacing them: the merge took a while, and somebody may have put a file there
        output_guard.refuse_foreign_file(out, stats_path, STATS_KEYS, "merge")
        output_guard.refuse_foreign_stats(stats_path, STATS_KEYS, "merge")
        sha = _write_merged(out, _shuffled_entries(results, opts.seed), stats_path)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)

    stats = {
        "records": kept,
        "tokens": sum(c.tokens for c in per_source.values()),
        "loss_tokens": sum(c.loss_tokens for c in per_source.values()),
        "max_len": opts.max_len,
        "on_long": opts.on_long,
        "seed": opts.seed,
        "tokenizer": opts.tokenizer,
        "mask_method": method,
        "char_bound": max_chars,
        "line_bound": max_line,
        "sources": {
            name: {
                "shape": _shape_of(shapes[name]),
                "shapes": shapes[name],
                "records": c.records,
                "tokens": c.tokens,
                "loss_tokens": c.loss_tokens,
                "read": c.read,
                "dropped_too_long": c.dropped_too_long,
                "dropped_empty_mask": c.dropped_empty_mask,
                "truncated": c.truncated,
                "over_char_bound": c.over_char_bound,
                "lines_too_long": c.lines_too_long,
                "skipped": reports[name].invalid(),
                "input": reports[name].to_json(),
            }
            for name, c in per_source.items()
        },
        "skipped": sum(r.invalid() for r in reports.values()),
        "policy": {
            "strict": policy.strict,
            "max_invalid": policy.max_invalid,
            "role_map": dict(policy.role_map),
            "on_assistant_first": policy.on_assistant_first,
            "same_role": policy.same_role,
        },
        "dropped": sum(c.dropped_too_long + c.dropped_empty_mask for c in per_source.values()),
        "truncated": sum(c.truncated for c in per_source.values()),
        "dataset_sha256": sha,
    }
    write_json_atomic(stats_path, stats)
    events.artifact(str(out), bytes=out.stat().st_size, records=kept)
    events.artifact(str(stats_path), bytes=stats_path.stat().st_size)
    for line in _summary(stats):
        print(line, flush=True)
    return stats


def _summary(stats: dict) -> Iterator[str]:
    head = ("source", "records", "tokens", "loss", "skipped", "dropped", "truncated")
    yield "merge: {:<20} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}".format(*head)
    rows = [
        (name, s["records"], s["tokens"], s["loss_tokens"], s["skipped"], s["dropped_too_long"] + s["dropped_empty_mask"],
         s["truncated"])
        for name, s in stats["sources"].items()
    ]
    rows.append(("total", stats["records"], stats["tokens"], stats["loss_tokens"], stats["skipped"], stats["dropped"],
                 stats["truncated"]))
    for row in rows:
        yield "merge: {:<20} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}".format(*row)


def main(argv: list[str] | None = None) -> int:
    opts = MergeOptions(**vars(_parser().parse_args(argv)))
    started = time.monotonic()

    def body() -> int:
        try:
            with EventWriter.from_env() as events:
                merge(opts, events)
        except MemoryError:
            raise StageError("out of memory; lower --max-len or --max-line-bytes, or use fewer --workers") from None
        print(f"merge: wrote {opts.out} in {time.monotonic() - started:.1f}s", flush=True)
        return 0

    # SIGTERM and Ctrl-C unwind through merge's `finally`, so its temporary files go with it; a
    # forked tokenizer worker signalled before init_worker resets the handlers ends quietly
    with on_sigterm(signals=(signal.SIGTERM, signal.SIGINT)):
        return run_program("merge", body, stop_note="temporary files removed")


if __name__ == "__main__":
    sys.exit(main())
