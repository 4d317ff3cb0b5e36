"""The evaluate report as the console draws it: acceptance per draft position, and the
settings of a sweep, each with its acceptance length.

The report is `pipeline.evaluate --report`'s JSON (docs/export-evaluate.md). The reader is
tolerant on purpose: the report gains fields as evaluation grows (a sweep of SGLang
settings, speedup estimates), and a console must draw what an older or newer stage wrote
rather than nothing. Any JSON file without an acceptance length is not a report (a phase's
other outputs, a stats file): the reader returns None and the view shows nothing.

Read in a poller thread, never on the UI loop: `ReportReader.read` stats its candidates and
parses only a file whose size or mtime changed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_REPORT_BYTES = 32 << 20  # a report with per-prompt figures for many thousand prompts
MAX_SETTINGS = 64
MAX_POSITIONS = 32
SWEEP_KEYS = ("settings", "sweep", "configs", "results")
STEP_KEYS = ("num_steps", "steps", "speculative_num_steps")
TOPK_KEYS = ("topk", "eagle_topk", "speculative_eagle_topk")
DRAFT_KEYS = ("num_draft_tokens", "draft_tokens", "speculative_num_draft_tokens")
SPEEDUP_KEYS = ("speedup_estimate", "estimated_speedup", "speedup", "speedup_forwards")
LENGTH_KEYS = ("acceptance_length", "mean_spec_accept_length", "accept_length")


@dataclass(frozen=True)
class Setting:
    """One setting of a sweep: `label` as SGLang's flags order it (steps,topk,draft tokens)."""

    label: str
    acceptance_length: float
    accept_rate: tuple[float, ...]
    speedup: float | None


@dataclass(frozen=True)
class AcceptanceView:
    """What the evaluate detail draws; `rates_of` names the setting the per-position rates
    belong to when they come from a sweep rather than the report's own figures."""

    path: str
    mtime: float
    acceptance_length: float | None
    num_steps: int | None
    prompts: int | None
    accept_rate: tuple[float, ...]
    rates_of: str | None
    settings: tuple[Setting, ...]
    best: str | None
    flags: str | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _first(d: Mapping[str, Any], keys: Sequence[str]) -> float | None:
    for key in keys:
        if (x := _number(d.get(key))) is not None:
            return x
    return None


def _rates(value: Any) -> tuple[float, ...]:
    if not isinstance(value, list):
        return ()
    nums = [_number(x) for x in value[:MAX_POSITIONS]]
    return tuple(min(1.0, max(0.0, x)) for x in nums if x is not None)


def _label(d: Mapping[str, Any], index: int) -> str:
    for key in ("label", "setting", "name", "config"):
        v = d.get(key)
        if isinstance(v, str) and v.strip():
            return v.strip()[:24]
        if isinstance(v, list) and v and all(_number(x) is not None for x in v):
            return ",".join(f"{x:g}" for x in v)[:24]
    parts = [_first(d, keys) for keys in (STEP_KEYS, TOPK_KEYS, DRAFT_KEYS)]
    if parts[0] is not None and all(p is not None for p in parts):
        return ",".join(f"{p:g}" for p in parts if p is not None)
    if parts[0] is not None:
        return f"{parts[0]:g} steps"
    return f"#{index + 1}"


def _settings(report: Mapping[str, Any]) -> tuple[Setting, ...]:
    for key in SWEEP_KEYS:
        items = report.get(key)
        if not isinstance(items, list):
            continue
        out = []
        for i, item in enumerate(items[:MAX_SETTINGS]):
            if isinstance(item, Mapping) and (length := _first(item, LENGTH_KEYS)) is not None:
                out.append(Setting(_label(item, i), length, _rates(item.get("accept_rate")),
                                   _first(item, SPEEDUP_KEYS)))
        if out:
            return tuple(out)
    return ()


def _best(report: Mapping[str, Any], settings: tuple[Setting, ...]) -> str | None:
    """The report's own pick when it names one; else the fastest by its speedup figures,
    else the longest acceptance."""
    if not settings:
        return None
    named = report.get("best")
    labels = [s.label for s in settings]
    if isinstance(named, str) and named in labels:
        return named
    if isinstance(named, int) and not isinstance(named, bool) and 0 <= named < len(settings):
        return labels[named]
    if isinstance(named, Mapping):
        label = _label(named, -1)
        if label in labels:
            return label
    if all(s.speedup is not None for s in settings):
        return max(settings, key=lambda s: s.speedup or 0.0).label
    return max(settings, key=lambda s: s.acceptance_length).label


def _flags(report: Mapping[str, Any]) -> str | None:
    best = report.get("best")
    for key in ("sglang_flags", "flags", "best_flags"):
        v = report.get(key)
        if v is None and isinstance(best, Mapping):
            v = best.get(key)  # pipeline.evaluate: {"best": {"setting": ..., "flags": ...}}
        if isinstance(v, str) and v.strip():
            return " ".join(v.split())[:400]
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return " ".join(v)[:400]
    return None


def parse_report(report: Any, path: str = "", mtime: float = 0.0) -> AcceptanceView | None:
    """The view of one parsed report; None when it holds no acceptance figure."""
    if not isinstance(report, Mapping):
        return None
    settings = _settings(report)
    length = _first(report, LENGTH_KEYS)
    if length is None and not settings:
        return None
    best = _best(report, settings)
    rates = _rates(report.get("accept_rate"))
    rates_of = None
    if not rates and best is not None:
        rates = next(s.accept_rate for s in settings if s.label == best)
        rates_of = best
    steps = _first(report, STEP_KEYS)
    prompts = _number(report.get("prompts"))
    return AcceptanceView(path=path, mtime=mtime, acceptance_length=length,
                          num_steps=None if steps is None else int(steps),
                          prompts=None if prompts is None else int(prompts),
                          accept_rate=rates, rates_of=rates_of, settings=settings, best=best,
                          flags=_flags(report))


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
    acceptance report, else None; never raises (a missing, unreadable, oversized or
    foreign file is skipped). A file whose (size, mtime) is unchanged since it was last
    parsed is not parsed again. For one poller thread."""

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
        view = None
        if st.st_size <= MAX_REPORT_BYTES:
            try:
                with open(path, "rb") as f:
                    view = parse_report(json.loads(f.read(MAX_REPORT_BYTES + 1)), path, st.st_mtime)
            except (OSError, ValueError, RecursionError):
                view = None
        if len(self._cache) > 16:
            self._cache.clear()
        self._cache[path] = (key, view)
        return view
