"""The selected phase's latest pre-flight (or verify) results with their evidence.

What needs the operator comes first: failing checks, then warnings and overrides; the
checks that pass fold into one line (`✓ 5 passed`), so at 80x24 a failure is never scrolled
out of sight by five green lines. `e` (or enter) opens every check full screen
(`screens/checks_screen.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from console.core.checks.result import CheckResult
from console.ui.render import check_glyph, cut_left, fit_words, fmt_time, looks_like_epoch

_ORDER = {"fail": 0, "warn": 1, "pass": 2}
NOT_CHECKED = "not checked yet: press c"


def _evidence(key: str, value: Any) -> str:
    if looks_like_epoch(key, value):
        return fmt_time(value, seconds=True)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)[:200]
    return str(value)[:200]


def ordered(results: Sequence[CheckResult]) -> list[CheckResult]:
    """Failing first, then warnings and overridden ones, then passing; stable within each."""
    return sorted(results, key=lambda r: 1 if r.overridden else _ORDER.get(r.status, 1))


def _row(r: CheckResult, evidence_lines: int, width: int | None = None) -> list[Content]:
    """A check's lines; with `width`, each cut to it at a word boundary with an ellipsis at
    the end (the check's name whole whenever it fits), never wrapped inside a name."""
    msg = r.message.splitlines()[0] if r.message else ""
    sev = "" if r.severity == "error" else " (warning)"
    name = r.name
    if width is not None:
        room = max(1, width - 2)
        if len(name) + len(sev) > room:
            name, sev, msg = _fit_name(name, room), "", ""
        else:
            msg = fit_words(msg, room - len(name) - len(sev) - 1)
    rows = [Content.assemble(check_glyph(r.status, r.overridden), " ", (name, "bold"), (sev, "$text-muted"),
                             " " if msg else "", msg)]
    if r.overridden:
        text = f"    overridden: {r.reason}"
        rows.append(Content.styled(fit_words(text, width) if width else text, "$warning"))
    for k, v in list(r.evidence.items())[:evidence_lines]:
        key, value = f"    {k}: ", _evidence(k, v)
        if width is not None:
            room = max(1, width - len(key))
            # A path keeps its end (the part that tells files apart), other values their start.
            value = cut_left(value, room) if "/" in value and " " not in value else fit_words(value, room)
        rows.append(Content.assemble((key, "$text-muted"), (value, "$text")))
    return rows


def _fit_name(name: str, width: int) -> str:
    """A check name cut to `width` before a "-" or ":" with an ellipsis, never inside a word."""
    if len(name) <= width:
        return name
    head = name[: max(1, width - 1)]
    at = max(head.rfind("-"), head.rfind(":"))
    return (head[:at] if at > 0 else head) + "…"


def _pack(names: list[str], width: int, rows: int) -> list[str]:
    """Names joined by ", " into at most `rows` lines of `width`, never split inside a name;
    what does not fit ends the last line with "…" (a name longer than a line is cut at its end)."""
    lines: list[str] = []
    cur = ""
    for i, name in enumerate(names):
        piece = name if not cur else f"{cur}, {name}"
        if len(piece) <= width:
            cur = piece
            continue
        if cur:
            lines.append(cur + ",")
        cur = _fit_name(name, width)
        if len(lines) == rows - 1:
            rest = names[i:]
            last = ", ".join(rest)
            if len(last) > width:
                last = fit_words(last, width, sep=", ")
                if len(rest[0]) + 1 > width:  # the first name alone is too long
                    last = _fit_name(rest[0], width)
            lines.append(last)
            return lines
    if cur:
        lines.append(cur)
    return lines[:rows]


def render_results(results: Sequence[CheckResult], evidence_lines: int = 4,
                   collapse_passing: bool = False, width: int | None = None) -> Content:
    """Failing and warning checks with their evidence, then the passing ones (folded into
    one line with `collapse_passing`); with `width`, one screen row per line, each cut at a
    word boundary with an ellipsis (the full text when unfolded: `e`)."""
    rows: list[Content] = []
    passing = [r for r in results if r.status == "pass" and not r.overridden]
    for r in ordered(results):
        if collapse_passing and r in passing:
            continue
        rows += _row(r, evidence_lines if r.status != "pass" or not collapse_passing else 0, width)
    if collapse_passing and passing:
        count = f"{len(passing)} passed"
        hint = "  e: all"
        names = [r.name for r in passing]
        inline = ", ".join(names)
        more: list[str] = []
        if width is not None and 2 + len(count) + 2 + len(inline) + len(hint) > width:
            # Not on one row: the names on up to two rows under it, whole, packed at commas.
            inline, more = "", _pack(names, max(4, width - 2), rows=2)
        rows.append(Content.assemble(check_glyph("pass"), " ", (count, "bold"),
                                     (f": {inline}" if inline else "", "$text-muted"), (hint, "$text-muted")))
        rows += [Content.styled("  " + line, "$text-muted") for line in more]
    return Content("\n").join(rows)


@dataclass(frozen=True)
class Shown:
    """What the view shows: results (None: not run yet, and `hint` says so) under `title`."""

    results: tuple[CheckResult, ...] | None
    title: str
    hint: str = NOT_CHECKED


class ChecksView(VerticalScroll):
    DEFAULT_CSS = """
    ChecksView { height: 1fr; }
    ChecksView > Static { width: 1fr; }
    ChecksView.-folded { scrollbar-size-vertical: 0; overflow-x: hidden; }
    """
    BINDINGS = [
        Binding("e,enter", "screen.expand_checks", "All checks", show=False, id="checks.expand",
                tooltip="Every check full screen: verdict, message, evidence"),
    ]

    shown: reactive[Shown] = reactive(Shown(None, "checks"), init=False)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.title = "checks"

    @property
    def results(self) -> tuple[CheckResult, ...] | None:
        return self.shown.results

    def compose(self) -> ComposeResult:
        yield Static(Content.styled(NOT_CHECKED, "$text-muted"), id="checks-body")

    def show(self, results: Sequence[CheckResult] | None, title: str, hint: str = NOT_CHECKED) -> None:
        self.shown = Shown(None if results is None else tuple(results), title, hint)

    def watch_shown(self, shown: Shown) -> None:
        self.border_title = shown.title
        self._draw()

    def _draw(self) -> None:
        body = self.query_one("#checks-body", Static)
        results = self.results
        if results is None:
            body.update(Content.styled(self.shown.hint, "$text-muted"))
        elif not results:
            body.update(Content.styled("no checks configured", "$text-muted"))
        else:
            # One row per line, cut at words, so no name breaks and no scrollbar covers text;
            # every check in full is `e`'s screen.
            width = self.scrollable_content_region.width or self.size.width or 0
            body.update(render_results(results, collapse_passing=True, width=width or None))
        self.set_class(True, "-folded")

    def on_resize(self) -> None:
        if self.results:
            self._draw()
