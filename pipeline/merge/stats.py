"""What a merge kept and dropped, per source: the workers' counts added up, the warnings an
operator reads, the stats file written beside the dataset and the summary table printed last."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.chat.sources import SourcePolicy, SourceReport
from pipeline.events import EventWriter, warn
from pipeline.merge.chunks import ChunkResult, SourceCounts
from pipeline.merge.options import Options
from pipeline.program_edge import BadInput
from pipeline.records.merge_stats import MergeStats, Policy, SourceStats


@dataclass
class Tally:
    """The workers' results added up per source, with the reader's own counts folded in."""

    counts: dict[str, SourceCounts] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    oversize: dict[str, list[str]] = field(default_factory=dict)
    shapes: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return sum(c.records for c in self.counts.values())


def tally(results: list[ChunkResult], reports: dict[str, SourceReport]) -> Tally:
    t = Tally()
    for name in reports:
        t.counts[name], t.examples[name], t.oversize[name], t.shapes[name] = SourceCounts(), [], [], {}
    for res in results:
        t.counts[res.source].add(res.counts)
        t.examples[res.source] += res.empty_examples
        t.oversize[res.source] += res.oversize_examples
        for shape, n in res.shapes.items():
            t.shapes[res.source][shape] = t.shapes[res.source].get(shape, 0) + n
    for name, c in t.counts.items():
        report = reports[name]
        c.read = report.records
        c.lines_too_long = report.lines_too_long
        c.dropped_too_long += report.lines_too_long
    return t


def refuse_empty(t: Tally, reports: dict[str, SourceReport], out: Path) -> None:
    """BadInput when every sample was dropped, saying why each went."""
    if t.kept:
        return
    too_long = sum(c.dropped_too_long for c in t.counts.values())
    empty = sum(c.dropped_empty_mask for c in t.counts.values())
    skipped = sum(r.records - r.usable - r.lines_too_long for r in reports.values())
    raise BadInput(
        f"every sample was dropped ({too_long} too long, {empty} with no assistant tokens, {skipped} "
        f"skipped or left out by the reader); nothing written to {out}. Raise --max-len or use --on-long truncate"
    )


def _shape_of(shapes: dict[str, int]) -> str:
    if not shapes:
        return "none"
    return next(iter(shapes)) if len(shapes) == 1 else "mixed"


def report_drops(
    name: str,
    c: SourceCounts,
    report: SourceReport,
    examples: list[str],
    oversize: list[str],
    opts: Options,
    max_chars: int,
    events: EventWriter,
) -> None:
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
        warn("merge", f"{name}: {note}", events, source=name)


def _source_stats(t: Tally, name: str, report: SourceReport) -> SourceStats:
    c = t.counts[name]
    return SourceStats(
        shape=_shape_of(t.shapes[name]),
        shapes=t.shapes[name],
        records=c.records,
        tokens=c.tokens,
        loss_tokens=c.loss_tokens,
        read=c.read,
        dropped_too_long=c.dropped_too_long,
        dropped_empty_mask=c.dropped_empty_mask,
        truncated=c.truncated,
        over_char_bound=c.over_char_bound,
        lines_too_long=c.lines_too_long,
        skipped=report.invalid(),
        input=report.to_record(),
    )


def stats_of(t: Tally, reports: dict[str, SourceReport], opts: Options, policy: SourcePolicy, method: str,
             bounds: tuple[int, int], sha: str, tokenizer_identity: str) -> MergeStats:
    """The stats file's content; `dataset_sha256` ties it to the dataset it describes, and
    `tokenizer_identity` to the tokenizer its ids mean text under."""
    counts = t.counts.values()
    return MergeStats(
        records=t.kept,
        tokens=sum(c.tokens for c in counts),
        loss_tokens=sum(c.loss_tokens for c in counts),
        max_len=opts.max_len,
        on_long=opts.on_long,
        seed=opts.seed,
        tokenizer=opts.tokenizer,
        mask_method=method,
        char_bound=bounds[0],
        line_bound=bounds[1],
        sources={name: _source_stats(t, name, reports[name]) for name in t.counts},
        skipped=sum(r.invalid() for r in reports.values()),
        policy=Policy(
            strict=policy.strict,
            max_invalid=policy.max_invalid,
            role_map=dict(policy.role_map),
            on_assistant_first=policy.on_assistant_first,
            same_role=policy.same_role,
        ),
        dropped=sum(c.dropped_too_long + c.dropped_empty_mask for c in counts),
        truncated=sum(c.truncated for c in counts),
        dataset_sha256=sha,
        tokenizer_identity=tokenizer_identity,
    )


def summary(stats: MergeStats) -> Iterator[str]:
    head = ("source", "records", "tokens", "loss", "skipped", "dropped", "truncated")
    yield "merge: {:<20} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}".format(*head)
    rows = [
        (name, s.records, s.tokens, s.loss_tokens, s.skipped, s.dropped_too_long + s.dropped_empty_mask, s.truncated)
        for name, s in stats.sources.items()
    ]
    rows.append(("total", stats.records, stats.tokens, stats.loss_tokens, stats.skipped, stats.dropped,
                 stats.truncated))
    for row in rows:
        yield "merge: {:<20} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}".format(*row)
