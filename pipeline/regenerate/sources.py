"""The records to regenerate, read through pipeline.chat.sources as merge reads them.

Read twice: once to count (so progress has a total and a bad source stops the run before
any answer is paid for), then again to stream, so memory never holds the dataset. Records
that open with an assistant turn are skipped and counted (there is no question to answer:
SpecForge's regeneration skips them too); so are records with no user turn, records too
large to prompt, and an id already met in an earlier source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.chat.records import ChatRecord
from pipeline.chat.sources import DEFAULT_ROLE_MAP, SourcePolicy, SourceReport, iter_records
from pipeline.records.source_reading import SourceReading
from pipeline.regenerate.conversation import MAX_RECORD_CHARS, record_chars
from pipeline.regenerate.errors import BadInput


@dataclass
class Plan:
    """What the counting pass found: usable records per reason they are not regenerated."""

    usable: int = 0
    skipped: Counter = field(default_factory=Counter)
    reports: dict[str, SourceReport] = field(default_factory=dict)

    def records_in(self) -> int:
        return sum(r.records for r in self.reports.values())

    def to_record(self) -> dict[str, SourceReading]:
        return {name: r.to_record() for name, r in self.reports.items()}

    def warnings(self) -> list[str]:
        return [f"{name}: {w}" for name, r in self.reports.items() for w in r.warnings()]


def source_name(path: Path) -> str:
    return path.stem if path.is_file() else path.name


def policy(role_map: dict[str, str], max_invalid: float, strict: bool) -> SourcePolicy:
    return SourcePolicy(strict=strict, max_invalid=max_invalid, role_map={**DEFAULT_ROLE_MAP, **role_map},
                        on_assistant_first="drop")


def _why_not(rec: ChatRecord) -> str | None:
    if not any(m["role"] == "user" for m in rec.conversations):
        return "no_user_turn"
    if record_chars(rec.conversations) > MAX_RECORD_CHARS:
        return "too_large"
    return None


def records(sources: tuple[Path, ...], pol: SourcePolicy, plan: Plan | None = None) -> Iterator[ChatRecord]:
    """Every record to regenerate, in input order; with `plan`, counts what is left out."""
    seen: set[str] = set()
    for path in sources:
        if not path.exists():
            raise BadInput(f"source {path} does not exist")
        name = source_name(path)
        report = SourceReport(source=name)
        for rec in iter_records(path, name, pol, report):
            why = _why_not(rec)
            if why is None and rec.id in seen:
                why = "duplicate_id"
            if why is not None:
                if plan is not None:
                    plan.skipped[why] += 1
                continue
            seen.add(rec.id)
            if plan is not None:
                plan.usable += 1
            yield rec
        if plan is not None:
            plan.reports[name] = report
            for kind in ("assistant_first", "duplicate_id"):
                plan.skipped[kind] += report.policies[kind]
            for reason, n in report.skipped.items():
                plan.skipped[reason] += n
