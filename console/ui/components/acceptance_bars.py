"""The evaluate detail's bars: the share of drafts accepted at each position, and, for a
sweep, each setting's acceptance length, so the setting to serve with is seen, not read.

A view of a frozen `AcceptanceView` (console/core/leaves/acceptance.py): assigning `view` redraws;
a report the console cannot read is its one line of reason.
The panel gives the bars as many rows as the terminal's height allows (`charts.chart_rows`);
what does not fit folds into a last row that still names it."""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.leaves.acceptance import AcceptanceView, Setting
from console.ui.render import bar, fit

TALL_ROWS = 8  # from this many rows on, the flags line shows too
SPLIT_MIN_WIDTH = 60  # below this the settings go under the positions, not beside them


def _title(v: AcceptanceView, stale: bool, width: int) -> Content:
    known = (("acceptance {:.3f}", v.acceptance_length), ("{} steps", v.num_steps), ("{} prompts", v.prompts))
    facts = [form.format(x) for form, x in known if x is not None]
    if v.settings:
        facts.append(f"{len(v.settings)} settings, best {v.best}")
    text = " · ".join(facts) or "acceptance"
    if stale:  # said first, so a narrow title loses its figures before the warning
        note = "previous run · "
        return Content.assemble((note, "$warning"), (fit(text, max(1, width - len(note))).rstrip(), "bold"))
    return Content.styled(fit(text, width).rstrip(), "bold")


def _bar_row(label: str, label_w: int, fraction: float, figure: str, bar_w: int, style: str,
             note: tuple[str, str] | None = None) -> Content:
    parts: list[Any] = [(fit(label, label_w), "$text-muted"), " ", bar(fraction, bar_w, style), " ", figure]
    if note:
        parts.append((f" {note[0]}", note[1]))
    return Content.assemble(*parts)


def _bar_width(width: int, label_w: int, tail_w: int) -> int:
    """One width for every bar of a column, so their lengths compare."""
    return max(3, width - label_w - tail_w - 2)


def position_rows(rates: tuple[float, ...], rows: int, width: int) -> list[Content]:
    """One bar per draft position; past `rows`, the rest as figures on the last row."""
    if not rates or rows <= 0:
        return []
    shown = rates if len(rates) <= rows else rates[: rows - 1]
    bar_w = _bar_width(width, 6, 4)
    out = [_bar_row(f"pos {i}", 6, r, f"{r:.2f}", bar_w, "$accent") for i, r in enumerate(shown, 1)]
    if len(shown) < len(rates):
        first = len(shown) + 1
        rest = " ".join(f"{r:.2f}" for r in rates[len(shown):])
        out.append(Content.styled(fit(f"pos {first}-{len(rates)}  {rest}", width), "$text-muted"))
    return out


def _pick(settings: tuple[Setting, ...], best: str | None, n: int) -> list[Setting]:
    """The best setting and the longest acceptances, in the report's order."""
    ranked = sorted(range(len(settings)),
                    key=lambda i: (settings[i].label == best, settings[i].acceptance_length), reverse=True)
    return [settings[i] for i in sorted(ranked[:n])]


def setting_rows(v: AcceptanceView, rows: int, width: int) -> list[Content]:
    """One bar per setting, its length against the longest, with the speedup when given."""
    settings = v.settings
    if not settings or rows <= 0:
        return []
    top = max(s.acceptance_length for s in settings) or 1.0
    shown = list(settings) if len(settings) <= rows else _pick(settings, v.best, rows - 1)
    label_w = min(10, max(len(s.label) for s in shown))
    figures = [f"{s.acceptance_length:.2f}" + (f" {s.speedup:.1f}x" if s.speedup is not None else "") for s in shown]
    bar_w = _bar_width(width, label_w, max(len(f) for f in figures) + len(" best"))
    out = []
    for s, figure in zip(shown, figures):
        is_best = s.label == v.best
        out.append(_bar_row(s.label, label_w, s.acceptance_length / top, figure, bar_w,
                            "$success" if is_best else "$primary", ("best", "$success") if is_best else None))
    if len(shown) < len(settings):
        out.append(Content.styled(fit(f"+{len(settings) - len(shown)} more settings (see the report)", width),
                                  "$text-muted"))
    return out


def acceptance_lines(v: AcceptanceView | None, width: int, rows: int, stale: bool = False) -> list[Content]:
    """The title and up to `rows` rows of bars: positions and settings side by side when the
    width allows, else the settings under the positions."""
    if v is None or width <= 0:
        return []
    if v.refused:
        return [Content.styled(fit(v.refused, width).rstrip(), "$warning")]
    out = [_title(v, stale, width)]
    if v.settings and width >= SPLIT_MIN_WIDTH:
        left_w = (width - 2) * 2 // 5
        right_w = width - 2 - left_w
        left = position_rows(v.accept_rate, rows, left_w)
        right = setting_rows(v, rows, right_w)
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else Content("")
            b = right[i] if i < len(right) else Content("")
            out.append(Content.assemble(a, " " * (left_w - a.cell_length + 2), b))
    else:
        body = position_rows(v.accept_rate, rows - min(len(v.settings), rows // 2), width)
        out += body + setting_rows(v, rows - len(body), width)
    if v.flags and rows >= TALL_ROWS:
        out.append(Content.assemble(("serve with ", "$text-muted"), fit(v.flags, max(1, width - 11))))
    return out


class AcceptanceBars(Widget):
    DEFAULT_CSS = "AcceptanceBars { height: auto; }"

    view: reactive[AcceptanceView | None] = reactive(None, init=False)
    stale: reactive[bool] = reactive(False, init=False)  # the report predates the run shown
    rows: reactive[int] = reactive(4, init=False)  # of bars, under the title (the panel sets it)

    def watch_view(self) -> None:
        self.refresh(layout=True)

    def watch_stale(self) -> None:
        self.refresh()

    def watch_rows(self) -> None:
        self.refresh(layout=True)

    def lines(self, width: int) -> list[Content]:
        return acceptance_lines(self.view, width, self.rows, self.stale)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(self.lines(width))

    def render(self) -> Content:
        return Content("\n").join(self.lines(self.content_region.width or self.size.width or 40))
