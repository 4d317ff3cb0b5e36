"""Live stats of the selected phase's run, from its events: progress, rate, ETA, bytes
written, tokens/s, and a sparkline per metric (loss...)."""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.lifecycle.livestats import LiveSnapshot, headline_metrics
from console.core.text.rates import format_rate
from console.ui.components.detail.charts import charted_metrics
from console.ui.render import (
    CHART_MIN_POINTS,
    bar,
    few_points,
    fit_parts,
    fit_words,
    fmt_bytes,
    fmt_duration,
    fmt_rate,
    sparkline,
)


def is_empty(s: LiveSnapshot | None) -> bool:
    return s is None or (s.done is None and not s.metrics and s.bytes_written is None
                         and s.last_message is None)


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def stats_lines(s: LiveSnapshot | None, width: int, compact: bool = False) -> list[Content]:
    """The panel's rows at `width`; `compact` (a short terminal): two, the last metric values inline."""
    if s is None or is_empty(s):
        return []
    out: list[Content] = []
    if s.done is not None:
        frac = s.fraction
        count = f"{_num(s.done)}/{_num(s.total)} {s.unit or ''}".strip() + (f", {_num(s.failed)} failed" if s.failed else "")
        pct = f"{100 * frac:5.1f}%" if frac is not None else ""
        bar_w = max(6, width - len(count) - len(pct) - 2)
        out.append(Content.assemble(bar(frac, bar_w, "$success"), " ", (pct, "bold"), " ", count))
    facts: list[tuple[int, str]] = []  # (rank, text): short of room, the highest rank gives way first
    if s.rate is not None:
        facts.append((0, format_rate(s.rate, s.unit or "")))
    if s.eta_s is not None:
        facts.append((0, f"ETA {fmt_duration(s.eta_s)}"))
    elif s.estimating:
        facts.append((0, "ETA estimating…"))
    if s.bytes_written is not None:
        facts.append((2, f"{fmt_bytes(s.bytes_written)} written"))
    if s.warnings:
        facts.append((1, f"⚠ {s.warnings} warning{'s' if s.warnings > 1 else ''}"))
    if s.remaining_bytes is not None:
        facts.append((3, f"{fmt_bytes(s.remaining_bytes)} to go"))
    if s.tokens_per_s is not None:
        facts.append((2, f"{fmt_rate(s.tokens_per_s)} tok/s"))
    figures = headline_metrics(s.metrics)
    charted = set(charted_metrics(s.curves))  # drawn over the whole run under the stats
    inline = figures[:2] if compact else [f for f in figures if f.name in charted]
    facts += [(1 if i == 0 else 2, f.label) for i, f in enumerate(inline)]
    if not compact:
        figures = [f for f in figures if f.name not in charted]
    if facts:
        out.append(Content.styled(fit_parts([t for _, t in facts], width, ranks=[r for r, _ in facts]), "$text"))
    if compact:
        return out
    out += [metric_row(figure.label, figure.values, width) for figure in figures[: (3 if width >= 100 else 2)]]
    msg = s.last_message
    if msg is not None and msg.level in ("warning", "error"):
        out.append(Content.styled(fit_words(f"{msg.level}: {msg.text}", width),
                                  "$error" if msg.level == "error" else "$warning"))
    return out


def metric_row(label: str, values: list[float], width: int) -> Content:
    """A metric's label and, beside it, its sparkline: one cell a point up to the width left,
    so a few points sit by their label, not at the far edge of a wide terminal; under
    three points, how many there are instead."""
    label_w = min(26, max(len(label) + 1, 12))
    head = fit_words(label, label_w - 1).ljust(label_w)
    if len(values) < CHART_MIN_POINTS:
        return Content.assemble((head, "$text-muted"), (fit_words(few_points(len(values)), width - label_w), "$text-muted"))
    return Content.assemble((head, "$text-muted"), (sparkline(values, min(len(values), max(4, width - label_w))), "$accent"))


class StatsPanel(Widget):
    DEFAULT_CSS = "StatsPanel { height: auto; }"

    stats: reactive[LiveSnapshot | None] = reactive(None, init=False)
    compact: reactive[bool] = reactive(False, layout=True)  # a short terminal: two lines, metrics inline

    def set_compact(self, compact: bool) -> None:
        self.compact = compact

    def show(self, stats: LiveSnapshot | None) -> None:
        self.stats = stats

    def watch_stats(self, old: LiveSnapshot | None, stats: LiveSnapshot | None) -> None:
        self.display = not is_empty(stats)
        # A new rate or count redraws these rows; only a row more or less needs a layout.
        width = self.content_region.width or self.size.width or 40
        if len(stats_lines(old, width, self.compact)) != len(self.lines(width)):
            self.refresh(layout=True)

    def lines(self, width: int) -> list[Content]:
        return stats_lines(self.stats, width, self.compact)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return max(1, len(self.lines(width)))

    def render(self) -> Content:
        width = self.content_region.width or self.size.width or 40
        return Content("\n").join(self.lines(width))
