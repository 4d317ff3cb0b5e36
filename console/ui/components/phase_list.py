"""The phase checklist: one row per phase with its state glyph, id, title, duration and,
when something needs the operator, why (a stalled run says so here first). The selected
row carries a marker as well as a background, for terminals that draw no colour."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from textual.binding import Binding
from textual.content import Content
from textual.reactive import var
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


@dataclass(frozen=True)
class PhaseRow:
    """What one row says. Two equal rows draw the same, so a poll that changes nothing
    redraws nothing; the selection marker and the width are the list's own."""

    id: str
    title: str
    state: str
    reason: str  # the first line of why it is in its state, "" when none
    duration: str  # "" until it has started
    stalled: bool  # running, and silent past its stall time
    starting: bool  # its start's checks are running (r): not the last run's ✓ or ✗ any more


def phase_rows(statuses: Sequence[Any], stalled: Collection[str], starting: Collection[str],
               now: float) -> tuple[PhaseRow, ...]:
    return tuple(PhaseRow(
        id=s.phase.id, title=s.phase.title, state=s.state,
        reason=s.reason.splitlines()[0] if s.reason else "",
        duration=fmt_duration(phase_duration(s, now)) if s.started_at is not None else "",
        stalled=s.phase.id in stalled and s.state == State.RUNNING,
        starting=s.phase.id in starting and s.state not in LIVE,
    ) for s in statuses)


class PhaseList(OptionList):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="phase-list.down", tooltip="Next phase"),
        Binding("k", "cursor_up", "Up", show=False, id="phase-list.up", tooltip="Previous phase"),
    ]

    rows: var[tuple[PhaseRow, ...]] = var((), init=False)

    def __init__(self, clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(**kw)
        self.clock = clock

    @property
    def selected_id(self) -> str | None:
        if self.highlighted is None or self.highlighted >= len(self.rows):
            return None
        return self.rows[self.highlighted].id

    def select_id(self, phase_id: str) -> None:
        ids = [r.id for r in self.rows]
        if phase_id in ids:
            self.highlighted = ids.index(phase_id)

    def show(self, statuses: Sequence[Any], stalled: Collection[str] = (), starting: Collection[str] = ()) -> None:
        self.rows = phase_rows(statuses, stalled, starting, self.clock())

    def watch_rows(self, old: tuple[PhaseRow, ...], rows: tuple[PhaseRow, ...]) -> None:
        if [r.id for r in rows] != [r.id for r in old]:
            self._rebuild(old, rows)
            return
        for i, (was, row) in enumerate(zip(old, rows)):
            if was != row:
                self._draw(i)

    def _rebuild(self, old: tuple[PhaseRow, ...], rows: tuple[PhaseRow, ...]) -> None:
        """Other phases (the first poll, or a config read again): new options, the cursor
        kept on the phase it was on."""
        at = self.highlighted
        keep = old[at].id if at is not None and at < len(old) else None
        ids = [r.id for r in rows]
        cursor = ids.index(keep) if keep in ids else (0 if ids else None)
        self.set_options([Option(self._prompt(r, i == cursor), id=r.id) for i, r in enumerate(rows)])
        self.highlighted = cursor
        self.refresh(layout=True)  # new rows: the list's height changes

    def _draw(self, index: int) -> None:
        self.replace_option_prompt_at_index(index, self._prompt(self.rows[index], index == self.highlighted))

    def watch_highlighted(self, old: int | None, highlighted: int | None) -> None:
        """The marker leaves one row for another."""
        super().watch_highlighted(highlighted)
        for i in {old, highlighted}:
            if i is not None and i < min(len(self.rows), self.option_count):
                self._draw(i)

    def on_resize(self) -> None:
        for i in range(min(len(self.rows), self.option_count)):
            self._draw(i)

    def _prompt(self, row: PhaseRow, selected: bool = False) -> Content:
        width = max(20, (self.scrollable_content_region.width or self.size.width or 40) - 1)
        dur, reason, dur_w = row.duration, row.reason, 7
        glyph = Content.styled("⚠", "$warning") if row.stalled else state_glyph(row.state)
        if row.starting:
            # Narrow: in the duration's place, so the row keeps its height (no second line).
            glyph, dur, reason = Content.styled("…", "$primary"), "start…", "starting: pre-flight checks"
        mark = Content.styled(MARKER if selected else " ", "bold $accent")
        id_w = min(14, max(len(r.id) for r in self.rows or (row,)) + 1)
        if width >= 72:
            title_w = min(34, width - 3 - id_w - dur_w - 12)
            rest = width - 3 - id_w - title_w - dur_w - 1
            why = ("stalled", "bold $warning") if row.stalled else (
                fit_words(reason, rest) if reason else "",
                state_style(row.state) if row.state in _EXPLAIN and not row.starting else "$text-muted")
            return Content.assemble(
                mark, glyph, " ", (fit(row.id, id_w), "$text-muted"), _title(row.title, title_w),
                (dur.rjust(dur_w), "$text-muted"), " ", why)
        # Narrow: the id (what the operator types to confirm) and as much title as fits.
        title_w = max(0, width - 3 - id_w - dur_w)
        line = Content.assemble(mark, glyph, " ", (fit(row.id, id_w), "bold" if selected else ""),
                                (_title(row.title, title_w), "$text-muted"), (dur.rjust(dur_w), "$text-muted"))
        if row.stalled:
            line = Content.assemble(line, "\n   ", ("⚠ stalled: no events, no log", "bold $warning"))
        elif reason and row.state in _EXPLAIN and not row.starting:
            line = Content.assemble(line, "\n   ", (fit_words(reason, width - 3), state_style(row.state)))
        return line
