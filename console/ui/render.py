"""Small text renderers the panels share: state glyphs, sparklines, bars, and compact
byte and duration forms. Styles are theme variables ($success, $error...) so every
theme colours them."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from textual.content import Content

from console.core.checks.result import CHECK_GLYPHS
from console.core.lifecycle.state import State, glyph_of
from console.core.text.durations import format_duration
from console.core.text.rates import compact_number
from pipeline.sizes import format_bytes

# The glyphs are the core's (`State.glyph`, `CHECK_GLYPHS`); the colours are the UI's.
STATE_STYLES: dict[str, str] = {
    State.PENDING: "$text-muted",
    State.BLOCKED: "$error",
    State.READY: "$accent",
    State.RUNNING: "$primary",
    State.VERIFYING: "$primary",
    State.DONE: "$success",
    State.FAILED: "$error",
    State.STALE: "$warning",
    State.STOPPED: "$warning",
}

CHECK_STYLES: dict[str, str] = {"pass": "$success", "warn": "$warning", "fail": "$error"}

_SPARKS = "▁▂▃▄▅▆▇█"
CHART_MIN_POINTS = 3  # fewer points draw no sparkline: they say how many there are


def state_glyph(state: str) -> Content:
    return Content.styled(glyph_of(state), state_style(state))


def state_style(state: str) -> str:
    return STATE_STYLES.get(state, "$text-muted")


def check_glyph(status: str, overridden: bool = False) -> Content:
    if overridden:
        return Content.styled("⚑", "$warning")
    return Content.styled(CHECK_GLYPHS.get(status, "?"), CHECK_STYLES.get(status, "$text-muted"))


def sparkline(values: Sequence[float | None], width: int, lo: float | None = None,
              hi: float | None = None) -> str:
    """The last values squeezed into `width` cells (bucket maxima, so a spike survives
    the squeeze); a gap (None) draws as a space."""
    if width <= 0:
        return ""
    vals = list(values)
    if not vals:
        return " " * width
    if len(vals) > width:
        step = len(vals) / width
        buckets = []
        for i in range(width):
            chunk = [v for v in vals[int(i * step): int((i + 1) * step)] if v is not None]
            buckets.append(max(chunk) if chunk else None)
        vals = buckets
    known = [v for v in vals if v is not None and math.isfinite(v)]
    if not known:
        return " " * width
    low = min(known) if lo is None else lo
    high = max(known) if hi is None else hi
    span = high - low
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append(" ")
            continue
        frac = 0.5 if span <= 0 else (min(max(v, low), high) - low) / span
        out.append(_SPARKS[min(len(_SPARKS) - 1, int(frac * len(_SPARKS)))])
    return "".join(out).rjust(width)


def bar(fraction: float | None, width: int, style: str = "$primary") -> Content:
    """A horizontal bar with eighth-cell resolution."""
    if width <= 0:
        return Content("")
    if fraction is None or not math.isfinite(fraction):
        return Content.styled("─" * width, "$text-muted")
    frac = min(max(fraction, 0.0), 1.0)
    eighths = int(round(frac * width * 8))
    full, part = divmod(eighths, 8)
    filled = "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
    rest = width - len(filled)
    return Content.assemble((filled, style), ("░" * rest, "$text-muted"))


def fmt_bytes(n: float | None, digits: int = 1) -> str:
    """SI, compact: 1.2T, 512.0G, 4.0K (pipeline.sizes: one definition for CLI and UI)."""
    if n is None or not math.isfinite(n):
        return "N/A"
    if abs(n) >= 1e21:  # no volume holds this: a bogus reading, in bounded width
        return ("-" if n < 0 else "") + ">999E"
    return format_bytes(n, digits, compact=True)


def fmt_pair(used: float | None, total: float | None) -> str:
    """"71/141G": used and total with one unit, the way nvidia-smi operators read it."""
    if used is None or total is None or not math.isfinite(used) or not math.isfinite(total) or not 0 < total < 1e21:
        return f"{fmt_bytes(used)}/{fmt_bytes(total)}"
    unit_total = fmt_bytes(total, 0)
    suffix = unit_total[-1]
    scale = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}.get(suffix)
    if scale is None:
        return f"{fmt_bytes(used)}/{unit_total}"
    if total / scale < 10:
        return f"{used / scale:.1f}/{total / scale:.1f}{suffix}"
    if used / scale < 10:
        return f"{used / scale:.1f}/{total / scale:.0f}{suffix}"
    return f"{used / scale:.0f}/{total / scale:.0f}{suffix}"


def fmt_duration(s: float | None) -> str:
    """3s, 4m05s, 2h03m, 3d04h (console.core.text.durations: one definition for CLI and UI)."""
    return format_duration(s)


def fmt_rate(x: float | None, unit: str = "") -> str:
    return compact_number(x, unit)


def fit(text: str, width: int) -> str:
    """Cut to `width` cells with an ellipsis; pad to it."""
    if width <= 0:
        return ""
    if len(text) > width:
        return text[: max(0, width - 1)] + "…"
    return text.ljust(width)


def fit_words(text: str, width: int, sep: str = " ") -> str:
    """Cut to `width` cells at a `sep` boundary, never inside an identifier, with an
    ellipsis at the end (one identifier longer than the width keeps its head and the "…")."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    cut = text[: max(0, width - 1)]
    at = cut.rfind(sep)
    if at > 0:
        cut = cut[:at].rstrip(" ,")
    return cut + "…"


def fit_parts(parts: Sequence[str], width: int, sep: str = " · ", ranks: Sequence[int] | None = None) -> str:
    """Whole parts joined by `sep` in `width` cells, with " …" after them when some are left
    out: a line of figures never ends inside one (`ETA 3m05s · loss 3.96 (av…`). Short of
    room the parts of the highest rank go first (the last of them first), so a less telling
    figure gives way to a more telling one further along the line."""
    keep = list(range(len(parts)))
    order = sorted(keep, key=lambda i: (ranks[i] if ranks else 0, i))
    while keep:
        text = sep.join(parts[i] for i in keep) + (" …" if len(keep) < len(parts) else "")
        if len(text) <= width:
            return text
        keep.remove(order.pop())
    return fit_words(parts[0], width) if parts else ""


def few_points(n: int) -> str:
    """What a chart of fewer than `CHART_MIN_POINTS` points says instead of its blocks (one
    or two blocks drawn full height read as a flat line at the maximum)."""
    return f"{n} point{'' if n == 1 else 's'} so far, charted from {CHART_MIN_POINTS}"


def fmt_time(t: float | None, seconds: bool = False) -> str:
    """A wall-clock time as operators write it: 2026-11-30 08:21 (local time)."""
    if t is None or not isinstance(t, (int, float)) or not math.isfinite(t):
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M", time.localtime(float(t)))


def looks_like_epoch(key: str, value: object) -> bool:
    """A number under a time-like key that is a plausible Unix time (2001..2286)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    k = key.lower()
    timeish = k in ("t", "time", "mtime", "when") or k.endswith(("_at", "_time", "mtime"))
    return timeish and 1e9 <= float(value) < 1e10


def cut_left(text: str, width: int) -> str:
    """Keep the end of a path, the part that tells files apart: …/runs/extract/output.log."""
    if width <= 0:
        return ""
    return text if len(text) <= width else "…" + text[-(width - 1):]
