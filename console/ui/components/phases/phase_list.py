"""The phase checklist: one row per phase with its state glyph, id, title, how many warnings
its run emitted (`⚠2`), duration and, when something needs the operator, why (a stalled run
says so here first). The selected row carries a marker as well as a background, for
terminals that draw no colour."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual.binding import Binding
from textual.content import Content
from textual.css.scalar import Unit
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


def running_for(seconds: float) -> str:
    """How long a live phase has run, as its row says it: by the minute (`<1m`, `4m`,
    `2h03m`). A row that changed every second repainted the list, and with it every panel
    between it and the detail, once a second; the detail header keeps the seconds."""
    if seconds < 60:
        return "<1m"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    return fmt_duration(seconds)


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
    warnings: int = 0  # warnings its latest run emitted (pipeline.events.warn)

    @property
    def badge(self) -> str:
        """The warnings' count as the row shows it, beside the duration: `⚠2 `, or ""."""
        return f"⚠{self.warnings} " if self.warnings else ""


def _duration(status: Any, now: float) -> str:
    took = phase_duration(status, now)
    if took is None:
        return ""
    return running_for(took) if getattr(status, "ended_at", None) is None else fmt_duration(took)


def phase_rows(statuses: Sequence[Any], stalled: Collection[str], starting: Collection[str],
               now: float, warnings: Mapping[str, int] | None = None) -> tuple[PhaseRow, ...]:
    warned = warnings or {}
    return tuple(PhaseRow(
        id=s.phase.id, title=s.phase.title, state=s.state,
        reason=s.reason.splitlines()[0] if s.reason else "",
        duration=_duration(s, now),
        stalled=s.phase.id in stalled and s.state == State.RUNNING,
        starting=s.phase.id in starting and s.state not in LIVE,
        warnings=warned.get(s.phase.id, 0),
    ) for s in statuses)


def second_lines(rows: Sequence[PhaseRow], room: int) -> frozenset[int]:
    """The rows whose reason (or stall) gets a line of its own in a narrow list: as many as
    the list's room holds beside one line per phase, a stall or a failure before a stale
    phase, then in list order. Every phase keeps its row; a reason left out is in the
    detail header when the phase is selected."""
    wanted = [i for i, r in enumerate(rows) if r.stalled or (r.reason and r.state in _EXPLAIN and not r.starting)]
    wanted.sort(key=lambda i: (0 if rows[i].stalled or rows[i].state != State.STALE else 1, i))
    return frozenset(wanted[: max(0, room - len(rows))])


@dataclass(frozen=True)
class Drawn:
    """What one option shows: its row, at a width, selected or not, with its second line or
    not. An option is drawn again only when this changes."""

    row: PhaseRow
    width: int
    selected: bool
    second: bool


class PhaseList(OptionList):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="phase-list.down", tooltip="Next phase"),
        Binding("k", "cursor_up", "Up", show=False, id="phase-list.up", tooltip="Previous phase"),
    ]

    rows: var[tuple[PhaseRow, ...]] = var((), init=False)

    def __init__(self, clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(**kw)
        self.clock = clock
        self._drawn: list[Drawn] = []

    @property
    def selected_id(self) -> str | None:
        if self.highlighted is None or self.highlighted >= len(self.rows):
            return None
        return self.rows[self.highlighted].id

    def select_id(self, phase_id: str) -> None:
        ids = [r.id for r in self.rows]
        if phase_id in ids:
            self.highlighted = ids.index(phase_id)

    def show(self, statuses: Sequence[Any], stalled: Collection[str] = (), starting: Collection[str] = (),
             warnings: Mapping[str, int] | None = None) -> None:
        self.rows = phase_rows(statuses, stalled, starting, self.clock(), warnings)

    def watch_rows(self, old: tuple[PhaseRow, ...], rows: tuple[PhaseRow, ...]) -> None:
        if [r.id for r in rows] != [r.id for r in old]:
            self._rebuild(old, rows)
        else:
            self._sync()

    def _rebuild(self, old: tuple[PhaseRow, ...], rows: tuple[PhaseRow, ...]) -> None:
        """Other phases (the first poll, or a config read again): new options, the cursor
        kept on the phase it was on."""
        at = self.highlighted
        keep = old[at].id if at is not None and at < len(old) else None
        ids = [r.id for r in rows]
        cursor = ids.index(keep) if keep in ids else (0 if ids else None)
        self._drawn = self._plan(cursor)
        self.set_options([Option(self._prompt(d), id=d.row.id) for d in self._drawn])
        self.highlighted = cursor
        self.refresh(layout=True)  # new rows: the list's height changes

    def _room(self) -> int:
        """Lines the list may take before it scrolls: its max height less its border."""
        most = self.styles.max_height
        if most is None or most.unit != Unit.CELLS:
            return 2 * len(self.rows)
        return max(1, int(most.value) - self.styles.gutter.height)

    def _plan(self, highlighted: int | None) -> list[Drawn]:
        """Every row as it is to be drawn now. The width is the list's less the scrollbar
        when the rows cannot all fit, decided here from the rows, never from whether a
        scrollbar happens to show: a row drawn for one width and shown at another wraps."""
        room, bar = self._room(), self.styles.scrollbar_size_vertical
        unscrolled = self.scrollable_content_region.width + (bar if self.show_vertical_scrollbar else 0)
        if unscrolled <= 0:
            unscrolled = 40
        wide = unscrolled - 1 >= 72
        second = frozenset() if wide else second_lines(self.rows, room)
        scrolls = len(self.rows) + len(second) > room
        width = max(20, unscrolled - (bar if scrolls else 0) - 1)
        return [Drawn(r, width, i == highlighted, i in second) for i, r in enumerate(self.rows)]

    def _sync(self) -> None:
        """Draw the options whose rows, selection, width or second line changed; a change of
        height lays the list out again, so no line is left where a taller row stood."""
        plan = self._plan(self.highlighted)
        if len(plan) != self.option_count:
            return
        before = self._drawn
        self._drawn = plan
        for i, drawn in enumerate(plan):
            if i >= len(before) or before[i] != drawn:
                self.replace_option_prompt_at_index(i, self._prompt(drawn))
        if sum(1 + d.second for d in plan) != sum(1 + d.second for d in before):
            self.refresh(layout=True)

    def watch_highlighted(self, old: int | None, highlighted: int | None) -> None:  # type: ignore[override]
        """The marker leaves one row for another."""
        super().watch_highlighted(highlighted)
        self._sync()

    def on_resize(self) -> None:
        self._sync()

    def _prompt(self, drawn: Drawn) -> Content:
        row, width, selected = drawn.row, drawn.width, drawn.selected
        dur, reason, dur_w = row.duration, row.reason, 7
        glyph = Content.styled("⚠", "$warning") if row.stalled else state_glyph(row.state)
        if row.starting:
            # Narrow: in the duration's place, so the row keeps its height (no second line).
            glyph, dur, reason = Content.styled("…", "$primary"), "start…", "starting: pre-flight checks"
        mark = Content.styled(MARKER if selected else " ", "bold $accent")
        id_w = min(14, max(len(r.id) for r in self.rows or (row,)) + 1)
        # The warnings' count sits by the duration, its room taken from the title (cut at a word).
        took = Content.styled(dur.rjust(dur_w), "$text-muted") if not row.badge else Content.assemble(
            (" " * max(0, dur_w - len(dur)), "$text-muted"), (row.badge, "$warning"), (dur, "$text-muted"))
        if width >= 72:
            title_w = min(34, width - 3 - id_w - dur_w - 12)
            rest = width - 3 - id_w - title_w - dur_w - 1
            title_w -= len(row.badge)
            why = ("stalled", "bold $warning") if row.stalled else (
                fit_words(reason, rest) if reason else "",
                state_style(row.state) if row.state in _EXPLAIN and not row.starting else "$text-muted")
            return Content.assemble(
                mark, glyph, " ", (fit(row.id, id_w), "$text-muted"), _title(row.title, title_w), took, " ", why)
        # Narrow: the id (what the operator types to confirm) and as much title as fits.
        title_w = max(0, width - 3 - id_w - dur_w - len(row.badge))
        line = Content.assemble(mark, glyph, " ", (fit(row.id, id_w), "bold" if selected else ""),
                                (_title(row.title, title_w), "$text-muted"), took)
        if not drawn.second:
            return line
        if row.stalled:
            return Content.assemble(line, "\n   ", ("⚠ stalled: no events, no log", "bold $warning"))
        return Content.assemble(line, "\n   ", (fit_words(reason, width - 3), state_style(row.state)))
