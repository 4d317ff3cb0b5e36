"""A merge: the sources read and tokenized by a pool of workers, the records that survive
shuffled into one JSONL, and its stats (the order of work; the pieces live beside it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline import output_guard
from pipeline.chat.sources import SourceReport
from pipeline.events import EventWriter
from pipeline.merge.chunks import EXAMPLES_KEPT, EncodeSettings, char_bound, line_bound
from pipeline.merge.options import Options
from pipeline.merge.output import default_stats_path, remove_stale_leftovers, shuffled_entries, write_merged
from pipeline.merge.pool import Progress, check_tokenizer, run_chunks
from pipeline.merge.reading import read_chunks, resolve_sources, source_policy
from pipeline.merge.stats import refuse_empty, report_drops, stats_of, summary, tally
from pipeline.program_edge import BadInput
from pipeline.records import merge_stats
from pipeline.target.tokenizer import tokenizer_identity

STATS_KEYS = merge_stats.KIND.legacy_keys  # what makes a stats file merge's own


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
