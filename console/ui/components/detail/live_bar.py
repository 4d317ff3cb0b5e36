"""One line above the detail: the project's deadline and the time left to it, and every phase
running now with its progress. The detail shows one phase; with several running at once, or a
deadline coming, the operator sees all of them here whichever one is selected (`n` moves to the
next). Hidden when there is neither: no deadline and one running phase at most."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from console.core.lifecycle.state import LIVE, glyph_of
from console.core.text.durations import format_duration


@dataclass(frozen=True)
class LiveLine:
    deadline: str  # "deadline 14:05:00 · 3m12s left", "" when none is set
    due_soon: bool  # a minute or less left: drawn as a warning
    phases: tuple[tuple[str, str, str], ...]  # (id, state, its figures) of each live phase

    @property
    def empty(self) -> bool:
        return not self.deadline and len(self.phases) < 2


def _figures(live: Any) -> str:
    if live is None or live.fraction is None:
        return ""
    eta = f" ETA {format_duration(live.eta_s)}" if live.eta_s is not None else ""
    return f"{live.fraction * 100:.0f}%{eta}"


def live_line(snapshot: Any, deadline: Any, now: float) -> LiveLine:
    """From a project snapshot and the project's deadline (None when none is set)."""
    phases = tuple((pv.id, str(pv.status.state), _figures(pv.live)) for pv in snapshot.phases
                   if pv.status.state in LIVE)
    if deadline is None:
        return LiveLine("", False, phases)
    if deadline.passed(now):
        return LiveLine(f"deadline {deadline.clock()} passed", False, phases)
    left = deadline.left(now)
    return LiveLine(f"deadline {deadline.clock()} · {format_duration(left)} left", left <= 60, phases)


class LiveBar(Static):
    DEFAULT_CSS = "LiveBar { height: 1; width: 1fr; padding: 0 1; }"

    view: reactive[LiveLine | None] = reactive(None, init=False)

    def watch_view(self, view: LiveLine | None) -> None:
        self.display = view is not None and not view.empty
        if view is None or view.empty:
            return
        parts: list[Any] = []
        if view.deadline:
            parts.append(("⏱ " + view.deadline, "bold $warning" if view.due_soon else "bold $accent"))
        for pid, state, figures in view.phases:
            if parts:
                parts.append(("  ·  ", "$text-muted"))
            parts += [(f"{glyph_of(state)} ", "$success"), (pid, "bold"), (f" {figures}" if figures else "", "$text-muted")]
        self.update(Content.assemble(*parts))
