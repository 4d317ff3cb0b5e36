"""The phase checklist: one row per phase with its state glyph, id, title, duration and,
when something needs the operator, why (a stalled run says so here first). The selected
row carries a marker as well as a background, for terminals that draw no colour."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from textual.binding import Binding
from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from console.core.lifecycle.state import LIVE, State
from console.ui.render import fit, fit_words, fmt_duration, state_glyph, state_style

# States whose reason is worth a second line even when the list is narrow.
_EXPLAIN = ("blocked", "failed", "stale")
MARKER = "›"


def phase_duration(status: Any, now: float) -> float | None:
    started = getattr(status, "started_at", None)
    if started is None:
        return None
    ended = getattr(status, "ended_at", None)
    return max(0.0, (ended if ended is not None else now) - started)


def _title(title: str, width: int) -> str:
    """The title cut at a word with an ellipsis (the full one is in the detail header)."""
    return fit_words(title, width).ljust(width) if width > 0 else ""


class PhaseList(OptionList):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="phase-list.down", tooltip="Next phase"),
        Binding("k", "cursor_up", "Up", show=False, id="phase-list.up", tooltip="Previous phase"),
    ]

    def __init__(self, clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(**kw)
        self.clock = clock
        self.statuses: list[Any] = []
        self.stalled: frozenset[str] = frozenset()
        self.starting: frozenset[str] = frozenset()  # pre-flight in flight for a start (r)
        self._ids: list[str] = []
        self._drawn: list[Content] = []

    @property
    def selected_id(self) -> str | None:
        if self.highlighted is None or self.highlighted >= len(self._ids):
            return None
        return self._ids[self.highlighted]

    def select_id(self, phase_id: str) -> None:
        if phase_id in self._ids:
            self.highlighted = self._ids.index(phase_id)

    def show(self, statuses: Sequence[Any], stalled: Collection[str] = (),
             starting: Collection[str] | None = None) -> None:
        self.statuses = list(statuses)
        self.stalled = frozenset(stalled)
        if starting is not None:
            self.starting = frozenset(starting)
        ids = [s.phase.id for s in self.statuses]
        if ids != self._ids:
            keep = self.selected_id
            self._ids = ids
            prompts = self._prompts()
            self.set_options([Option(p, id=i) for p, i in zip(prompts, ids)])
            self._drawn = prompts
            self.highlighted = ids.index(keep) if keep in ids else (0 if ids else None)
            self._replace(self._prompts())
            self.refresh(layout=True)  # new rows: the list's height changes
        else:
            self._replace(self._prompts())

    def _prompts(self) -> list[Content]:
        return [self._prompt(s, i == self.highlighted) for i, s in enumerate(self.statuses)]

    def _replace(self, prompts: list[Content]) -> None:
        """Redraw only the rows whose text or styles changed (most polls change none)."""
        for i, p in enumerate(prompts):
            old = self._drawn[i] if i < len(self._drawn) else None
            if old is None or old.plain != p.plain or old.spans != p.spans:
                self.replace_option_prompt_at_index(i, p)
        self._drawn = prompts

    def watch_highlighted(self, highlighted: int | None) -> None:
        super().watch_highlighted(highlighted)
        if self.statuses and len(self._drawn) == len(self.statuses):
            self._replace(self._prompts())

    def on_resize(self) -> None:
        if self.statuses:
            self._replace(self._prompts())

    def _prompt(self, s: Any, selected: bool = False) -> Content:
        width = max(20, (self.scrollable_content_region.width or self.size.width or 40) - 1)
        dur = fmt_duration(phase_duration(s, self.clock())) if s.started_at is not None else ""
        dur_w = 7
        stalled = s.phase.id in self.stalled and s.state == State.RUNNING
        reason = (s.reason or "").splitlines()[0] if s.reason else ""
        glyph = Content.styled("⚠", "$warning") if stalled else state_glyph(s.state)
        if s.phase.id in self.starting and s.state not in LIVE:
            # Its checks are running for a start: not the last run's ✓ or ✗ any more.
            # Narrow: in the duration's place, so the row keeps its height (no second line).
            glyph, dur, reason = Content.styled("…", "$primary"), "start…", "starting: pre-flight checks"
        mark = Content.styled(MARKER if selected else " ", "bold $accent")
        id_w = min(14, max(len(x) for x in self._ids or [s.phase.id]) + 1)
        if width >= 72:
            title_w = min(34, width - 3 - id_w - dur_w - 12)
            rest = width - 3 - id_w - title_w - dur_w - 1
            why = ("stalled", "bold $warning") if stalled else (
                fit_words(reason, rest) if reason else "",
                state_style(s.state) if s.state in _EXPLAIN and s.phase.id not in self.starting
                else "$text-muted")
            return Content.assemble(
                mark, glyph, " ", (fit(s.phase.id, id_w), "$text-muted"), _title(s.phase.title, title_w),
                (dur.rjust(dur_w), "$text-muted"), " ", why)
        # Narrow: the id (what the operator types to confirm) and as much title as fits.
        title_w = max(0, width - 3 - id_w - dur_w)
        line = Content.assemble(mark, glyph, " ", (fit(s.phase.id, id_w), "bold" if selected else ""),
                                (_title(s.phase.title, title_w), "$text-muted"), (dur.rjust(dur_w), "$text-muted"))
        if stalled:
            line = Content.assemble(line, "\n   ", ("⚠ stalled: no events, no log", "bold $warning"))
        elif reason and s.state in _EXPLAIN and s.phase.id not in self.starting:
            line = Content.assemble(line, "\n   ", (fit_words(reason, width - 3), state_style(s.state)))
        return line
