"""The console's background pre-flight: only the phases that could start next, each at
most once a period, so a blocked phase says why before anyone presses r without the
checks running on every status look."""

from __future__ import annotations

from console.core.flow.watch import PreflightSchedule
from console.core.lifecycle.state import PhaseStatus
from console.core.model.config import Phase


def _st(pid: str, state: str) -> PhaseStatus:
    return PhaseStatus(phase=Phase(id=pid, title=pid, argv=("true",)), state=state)


def test_preflight_picks_ready_and_blocked_phases_once_a_period() -> None:
    now = [100.0]
    schedule = PreflightSchedule(60.0, clock=lambda: now[0])
    phases = [_st("a", "ready"), _st("b", "blocked"), _st("c", "running"), _st("d", "done")]
    assert schedule.due(phases) == ["a", "b"]
    now[0] += 30
    assert schedule.due(phases) == []
    assert schedule.due([*phases, _st("e", "ready")]) == ["e"]  # a phase that just became ready
    now[0] += 30
    assert schedule.due(phases) == ["a", "b"]


def test_a_period_of_zero_turns_the_preflight_off() -> None:
    assert PreflightSchedule(0.0).due([_st("a", "ready")]) == []
