"""The evaluate detail's bars: the share of drafts accepted at each position, and, for a
sweep, each setting's acceptance length, so the setting to serve with is seen, not read.

A view of a frozen `AcceptanceView` (console/core/figures/acceptance.py): assigning `view` redraws;
a report the console cannot read is its one line of reason.
The panel gives the bars as many rows as the terminal's height allows (`charts.chart_rows`);
what does not fit folds into a last row that still names it."""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.figures.acceptance import AcceptanceView, SettingFigures
from console.ui.render import bar, fit, fit_parts, fit_words

TALL_ROWS = 8  # from this many rows on, the flags line shows too
SPLIT_MIN_WIDTH = 60  # below this the settings go under the positions, not beside them


def headline(v: AcceptanceView) -> SettingFigures | None:
    """The setting the title's figure and the per-position bars belong to: the best of a
    sweep (the report's top-level figures are its first setting's, which need not be it)."""
    if not v.settings:
        return None
    return next((s for s in v.settings if s.label == v.best), v.settings[0])


def _title(v: AcceptanceView, stale: bool, width: int) -> Content:
    head = headline(v)
    if head is None:
        known = (("acceptance {:.3f}", v.acceptance_length), ("{} steps", v.num_steps), ("{} prompts", v.prompts))
        facts = [form.format(x) for form, x in known if x is not None]
    else:
        facts = [f"acceptance {head.acceptance_length:.3f} at {head.label}"]
        if len(v.settings) > 1:
            facts.append(f"best of {len(v.settings)} settings")
        if v.prompts is not None:
            facts.append(f"{v.prompts} prompts")
    facts = facts or ["acceptance"]
    if stale:  # said first, so a narrow title loses its figures before the warning
        note = "previous run · "
        return Content.assemble((note, "$warning"), (fit_parts(facts, max(1, width - len(note))), "bold"))
    return Content.styled(fit_parts(facts, width), "bold")


def _rates_shown(v: AcceptanceView) -> tuple[tuple[float, ...], str | None]:
    """The per-position rates drawn and the setting they belong to: the headline setting's
    own, else the report's top-level ones, which are its first setting's."""
    head = headline(v)
    if head is not None and head.accept_rate:
        return head.accept_rate, head.label
    return v.accept_rate, v.settings[0].label if v.settings else None


def _positions(v: AcceptanceView, rows: int, width: int) -> list[Content]:
    """The per-position bars under a line naming their setting."""
    rates, of = _rates_shown(v)
    if not rates or rows <= 0:
        return []
    if of is None:
        return position_rows(rates, rows, width)
    if rows == 1:
        figures = [f"{r:.2f}" for r in rates]
        return [Content.styled(fit_parts([f"per position, {of}:", *figures], width, sep=" "), "$text-muted")]
    return [Content.styled(fit_words(f"per position, {of}", width), "$text-muted"),
            *position_rows(rates, rows - 1, width)]


def _speedup_note(v: AcceptanceView, width: int) -> list[Content]:
    """A single setting's speedup estimate, as a figure: one bar drawn full beside "0.2x"
    read as a strong result."""
    if len(v.settings) != 1 or v.settings[0].speedup is None:
        return []
    x = v.settings[0].speedup
    text = f"speedup estimate {x:.2f}x" + (" (slower than greedy decoding)" if x < 1 else "")
    return [Content.styled(fit_words(text, width), "$warning" if x < 1 else "$text-muted")]


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
        rest = [f"{r:.2f}" for r in rates[len(shown):]]
        out.append(Content.styled(fit_parts([f"pos {first}-{len(rates)} ", *rest], width, sep=" "), "$text-muted"))
    return out


def _pick(settings: tuple[SettingFigures, ...], best: str | None, n: int) -> list[SettingFigures]:
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
        out.append(Content.styled(fit_words(f"+{len(settings) - len(shown)} more settings (see the report)", width),
                                  "$text-muted"))
    return out


def acceptance_lines(v: AcceptanceView | None, width: int, rows: int, stale: bool = False) -> list[Content]:
    """The title and up to `rows` rows of bars: positions and settings side by side when the
    width allows, else the settings under the positions. A single setting has no settings
    column: its figures are in the title and its speedup estimate is a line of text."""
    if v is None or width <= 0:
        return []
    if v.refused:
        return [Content.styled(fit_words(v.refused, width), "$warning")]
    out = [_title(v, stale, width)]
    sweep = len(v.settings) > 1
    if sweep and width >= SPLIT_MIN_WIDTH:
        left_w = (width - 2) * 2 // 5
        right_w = width - 2 - left_w
        left = _positions(v, rows, left_w)
        right = setting_rows(v, rows, right_w)
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else Content("")
            b = right[i] if i < len(right) else Content("")
            out.append(Content.assemble(a, " " * (left_w - a.cell_length + 2), b))
    elif sweep:
        body = _positions(v, rows - min(len(v.settings), rows // 2), width)
        out += body + setting_rows(v, rows - len(body), width)
    else:
        note = _speedup_note(v, width)
        out += _positions(v, rows - len(note), width) + note[:max(0, rows)]
    if v.flags and rows >= TALL_ROWS:
        out.append(Content.assemble(("serve with ", "$text-muted"), fit_words(v.flags, max(1, width - 11))))
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
