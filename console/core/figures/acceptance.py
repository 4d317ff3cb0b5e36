"""The evaluate report as the console draws it: acceptance per draft position, and the
settings of a sweep, each with its acceptance length.

The report is `pipeline.evaluate --report`'s JSON, read through its record
(`pipeline/records/evaluate_report.py`), which checks every field's type and its version. A
phase's other JSON files (its stats, a config) are not reports: they show nothing. A report
this console cannot read (a version it does not know, a field of the wrong type) shows one
line saying why, never figures it would have to guess.

Read in a poller thread, never on the UI loop: `ReportReader.read` stats its candidates and
parses only a file whose size or mtime changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.records.codec import MalformedRecord, RecordError, UnknownVersion
from pipeline.records.evaluate_report import LocalReport, Report, read_report

MAX_SETTINGS = 64
MAX_POSITIONS = 32
LABEL_CHARS = 24


@dataclass(frozen=True)
class SettingFigures:
    """What the detail draws of one setting of a sweep (a row of the report): `label` as
    SGLang's flags order it (steps,topk,draft tokens), its acceptance figures and speedup."""

    label: str
    acceptance_length: float
    accept_rate: tuple[float, ...]
    speedup: float | None


@dataclass(frozen=True)
class AcceptanceView:
    """What the evaluate detail draws. `refused`: the one line that says why a report could not
    be read (its figures are then empty)."""

    path: str
    mtime: float
    acceptance_length: float | None
    num_steps: int | None
    prompts: int | None
    accept_rate: tuple[float, ...]
    settings: tuple[SettingFigures, ...]
    best: str | None
    flags: str | None
    refused: str | None = None


def _rates(rates: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(min(1.0, max(0.0, x)) for x in rates[:MAX_POSITIONS])


def view_of(report: Report, path: str = "", mtime: float = 0.0) -> AcceptanceView:
    """The view of a report: a local evaluation's figures and its sweep, or a server's mean."""
    if not isinstance(report, LocalReport):
        return AcceptanceView(path=path, mtime=mtime, acceptance_length=report.acceptance_length, num_steps=None,
                              prompts=report.prompts, accept_rate=(), settings=(), best=None, flags=None)
    settings = tuple(SettingFigures(row.setting[:LABEL_CHARS], row.acceptance_length, _rates(row.accept_rate),
                             row.speedup_estimate) for row in report.settings[:MAX_SETTINGS])
    return AcceptanceView(path=path, mtime=mtime, acceptance_length=report.acceptance_length,
                          num_steps=report.num_steps, prompts=report.prompts, accept_rate=_rates(report.accept_rate),
                          settings=settings, best=report.best.setting[:LABEL_CHARS],
                          flags=" ".join(report.best.flags.split()))


def refusal(error: RecordError, path: str, mtime: float) -> AcceptanceView | None:
    """The one line for a report that cannot be read; None for a file that is not a report."""
    if isinstance(error, UnknownVersion):
        line = (f"evaluate report of version {error.found!r}: this console reads version "
                f"{', '.join(map(str, error.known))}; rerun the evaluation or update eagle3-console")
    elif isinstance(error, MalformedRecord):
        line = f"evaluate report not readable: {error.where}: expected {error.expected}; rerun the evaluation"
    else:
        return None
    return AcceptanceView(path=path, mtime=mtime, acceptance_length=None, num_steps=None, prompts=None,
                          accept_rate=(), settings=(), best=None, flags=None, refused=line)


def report_candidates(artifacts: Iterable[str], outputs: Iterable[str | os.PathLike[str]],
                      root: str | os.PathLike[str]) -> tuple[str, ...]:
    """JSON files a phase wrote, newest artifact first, then its configured outputs; a
    relative artifact path is the stage's, whose working folder is the config's."""
    seen: list[str] = []
    for p in [*reversed(list(artifacts)), *outputs]:
        path = Path(p)
        if path.suffix.lower() != ".json":
            continue
        full = str(path if path.is_absolute() else Path(root) / path)
        if full not in seen:
            seen.append(full)
    return tuple(seen)


class ReportReader:
    """Contract: `read(candidates)` returns the view of the first candidate that is an
    evaluate report (a refusal's view when it is one this console cannot read), else None;
    never raises (a missing, unreadable, oversized or foreign file is skipped). A file whose
    (size, mtime) is unchanged since it was last read is not read again. For one poller thread."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple[int, int], AcceptanceView | None]] = {}

    def read(self, candidates: Sequence[str]) -> AcceptanceView | None:
        for path in candidates:
            view = self._read_one(path)
            if view is not None:
                return view
        return None

    def _read_one(self, path: str) -> AcceptanceView | None:
        try:
            st = os.stat(path)
        except OSError:
            self._cache.pop(path, None)
            return None
        key = (st.st_size, st.st_mtime_ns)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        view: AcceptanceView | None
        try:
            view = view_of(read_report(path), path, st.st_mtime)
        except RecordError as e:
            view = refusal(e, path, st.st_mtime)
        if len(self._cache) > 16:
            self._cache.clear()
        self._cache[path] = (key, view)
        return view
