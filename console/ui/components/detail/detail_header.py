"""The selected phase over its detail, in a line or two: glyph, id, title, state, how long
it has run, and why it stands where it stands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.content import Content
from textual.reactive import var
from textual.widgets import Static

from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.ui.components.phases.phase_list import phase_duration
from console.ui.render import fmt_duration, fmt_time, state_glyph, state_style

_EXPLAIN = (State.BLOCKED, State.FAILED, State.STALE)  # a reason in the state's colour


@dataclass(frozen=True)
class Heading:
    """What the header says; an empty part is left out. Two equal headings draw the same, so
    a poll that changes nothing redraws nothing. An empty `phase_id`: no phase selected."""

    phase_id: str
    title: str = ""
    state: str = ""
    note: str = ""  # while it runs: stalled, or busy on its first unit
    duration: str = ""
    started: str = ""  # when it started (where the terminal has room)
    exit_code: int | None = None  # of a run that ended
    service: bool = False
    destructive: bool = False
    reason: str = ""  # the first line of why, once it is not live

    def content(self) -> Content:
        if not self.phase_id:
            return Content.styled("no phase selected", "$text-muted")
        bits: list[Any] = [state_glyph(self.state), " ", (self.phase_id, "bold"), " · ", self.title, " · ",
                           (self.state, state_style(self.state))]
        if self.note == "stalled":
            bits += ["  ", ("⚠ stalled", "bold $warning")]
        elif self.note == "first unit":
            bits += ["  ", ("busy on its first unit", "$text-muted")]
        if self.duration:
            bits += [" ", (self.duration, "$text-muted")]
        if self.started:
            bits += [(f"  started {self.started}", "$text-muted")]
        if self.exit_code is not None:
            bits += [("  exit ", "$text-muted"), str(self.exit_code)]
        if self.service:
            bits += [("  service", "$text-muted")]
        if self.destructive:
            bits += [("  destructive", "$warning")]
        if self.reason:
            bits += ["\n", (self.reason, state_style(self.state) if self.state in _EXPLAIN else "$text-muted")]
        return Content.assemble(*bits)


NO_PHASE = Heading("")


def heading(st: PhaseStatus, *, stalled: bool, first_unit: bool, now: float, wide: bool) -> Heading:
    """`stalled`, `first_unit`: what the watch says of its run; `wide`: room for the start time."""
    running, live = st.state == State.RUNNING, st.state in LIVE
    dur = phase_duration(st, now)
    return Heading(
        st.phase.id, st.phase.title, st.state,
        note="stalled" if stalled and running else "first unit" if first_unit and running else "",
        duration=fmt_duration(dur) if dur is not None else "",
        started=fmt_time(st.started_at) if st.started_at is not None and wide else "",
        exit_code=None if live else st.exit_code,
        service=st.phase.kind == "service", destructive=bool(st.phase.confirm),
        reason=st.reason.splitlines()[0] if st.reason and not live else "",
    )


class DetailHeader(Static):
    view: var[Heading | None] = var(None, init=False)

    def watch_view(self, view: Heading | None) -> None:
        if view is None:
            return
        content = view.content()
        height = len(content.wrap(max(1, self.content_region.width)))
        self.update(content, layout=height != self.content_region.height)
