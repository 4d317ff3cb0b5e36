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

import os
import shutil
import signal
import sys
import time
from pathlib import Path

from pipeline import output_guard
from pipeline.chat.sources import SourceReport
from pipeline.events import EventWriter
from pipeline.merge.chunks import EXAMPLES_KEPT, EncodeSettings, char_bound, line_bound
from pipeline.merge.options import Options, build_parser
from pipeline.merge.output import default_stats_path, remove_stale_leftovers, shuffled_entries, write_merged
from pipeline.merge.pool import Progress, check_tokenizer, run_chunks
from pipeline.merge.reading import read_chunks, resolve_sources, source_policy
from pipeline.merge.stats import refuse_empty, report_drops, stats_of, summary, tally
from pipeline.program_edge import BadInput, StageError, on_sigterm, run_program
from pipeline.records import merge_stats
from pipeline.target.tokenizer import tokenizer_identity

STATS_KEYS = merge_stats.KIND.legacy_keys  # what makes a stats file merge's own


def _refuse_bad_options(opts: Options) -> None:
    if opts.max_len < 1:
        raise BadInput(f"--max-len must be at least 1, got {opts.max_len}")
    if opts.workers < 1:
        raise BadInput(f"--workers must be at least 1, got {opts.workers}")
    if opts.max_line_bytes is not None and opts.max_line_bytes < 2:
        raise BadInput(f"--max-line-bytes must be at least 2, got {opts.max_line_bytes}")
    if not opts.sources:
        trailing = (opts.include or opts.exclude or [""])[-1]
        hint = ""
        if trailing and Path(trailing).exists():
            hint = f" ('{trailing}' was read as a source name: put sources before --include/--exclude or end them with --)"
        raise BadInput(f"no SOURCE given{hint}")


def _guard_outputs(opts: Options, stats_path: Path) -> None:
    """Refuses an --out or --stats that is an input or another program's file, then clears
    what killed merges into the same --out left behind."""
    out = opts.out
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


def merge(opts: Options, events: EventWriter) -> merge_stats.MergeStats:
    _refuse_bad_options(opts)
    sources = resolve_sources(opts.sources, opts.include, opts.exclude)
    tokenizer, method = check_tokenizer(opts.tokenizer)
    out: Path = opts.out
    stats_path: Path = opts.stats or default_stats_path(out)
    _guard_outputs(opts, stats_path)
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
    progress = Progress(sources, reports, events)
    events.progress(0, 0, unit="samples", stage="tokenize")

    parts_dir = out.with_name(f".{out.name}.parts-{os.getpid()}")
    if parts_dir.exists():
        shutil.rmtree(parts_dir)
    parts_dir.mkdir()
    try:
        settings = EncodeSettings(
            opts.tokenizer, method, opts.max_len, opts.on_long, str(parts_dir), max_chars
        )
        results = run_chunks(read_chunks(sources, policy, reports), settings, tokenizer, workers, progress)
        progress.add(0, final=True)

        counted = tally(results, reports)
        for name, c in counted.counts.items():
            report_drops(name, c, reports[name], counted.examples[name][:EXAMPLES_KEPT],
                         counted.oversize[name][:EXAMPLES_KEPT], opts, max_chars, events)
        refuse_empty(counted, reports, out)
        # again, just before replacing them: the merge took a while, and somebody may have put a file there
        output_guard.refuse_foreign_file(out, stats_path, STATS_KEYS, "merge")
        output_guard.refuse_foreign_stats(stats_path, STATS_KEYS, "merge")
        sha = write_merged(out, shuffled_entries(results, opts.seed), stats_path)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)

    stats = stats_of(counted, reports, opts, policy, method, (max_chars, max_line), sha, tokenizer_identity(tokenizer))
    merge_stats.write_stats(stats_path, stats)
    events.artifact(str(out), bytes=out.stat().st_size, records=counted.kept)
    events.artifact(str(stats_path), bytes=stats_path.stat().st_size)
    for line in summary(stats):
        print(line, flush=True)
    return stats


def main(argv: list[str] | None = None) -> int:
    opts = Options(**vars(build_parser().parse_args(argv)))
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
