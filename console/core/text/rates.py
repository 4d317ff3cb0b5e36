"""A rate as an operator reads it, one definition for the console and the command line.
A phase doing less than one unit a second (evaluate on a CPU, train's steps) read
"0.0 prompts/s" beside an ETA of ten minutes; below one a second it reads per minute,
and below one every ten seconds as the time one unit takes."""

from __future__ import annotations

import math

from console.core.text.durations import format_duration


def singular(unit: str) -> str:
    """'prompts' -> 'prompt', for "20s/prompt"; a unit left out reads 'item'."""
    if not unit:
        return "item"
    return unit[:-1] if unit.endswith("s") and len(unit) > 1 and not unit.endswith("ss") else unit


def compact_number(x: float | None, unit: str = "") -> str:
    """12.3, 456, 7.8k, 1.2M: a counter's pace in at most six characters; '—' for none."""
    if x is None or not math.isfinite(x):
        return "—"
    if abs(x) >= 1e15:
        return f"{x:.0e}{unit}"  # no counter goes this fast: show the order, in bounded width
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{suffix}{unit}"
    return f"{x:.1f}{unit}" if abs(x) < 100 else f"{x:.0f}{unit}"


def format_rate(rate: float | None, unit: str = "") -> str:
    """12.3 samples/s, 30.0 prompts/min, 20s/prompt; '' when there is no rate."""
    if rate is None or not math.isfinite(rate) or rate <= 0:
        return ""
    plural = unit or "items"
    if rate >= 1:
        return f"{compact_number(rate)} {plural}/s"
    if rate >= 0.1:
        return f"{rate * 60:,.1f} {plural}/min"
    return f"{format_duration(round(1 / rate))}/{singular(unit)}"
