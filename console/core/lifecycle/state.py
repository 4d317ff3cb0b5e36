"""Phase states (docs/internals.md, "Phase states"), derived from what is on disk: the latest run's
files, the provenance records and, when known, the latest pre-flight results. Nothing
here is stored, so a console that starts late sees exactly what one that never
stopped would see."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from console.core.checks.result import CheckResult
from console.core.model.config import Config, Phase
from console.core.runs.rundir import RunDir
from console.core.text.durations import Elapsed


class State(StrEnum):
    """A phase's state. The values are the words `status --json`, the journal and the
    notifications carry, so a member compares equal to its word read back from a file."""

    PENDING = "pending"
    BLOCKED = "blocked"
    READY = "ready"
    RUNNING = "running"
    VERIFYING = "verifying"
    DONE = "done"
    FAILED = "failed"
    STALE = "stale"
    STOPPED = "stopped"

    @property
    def glyph(self) -> str:
        """The one-cell mark the CLI and the UI draw before a phase."""
        return GLYPHS[self]


GLYPHS: dict[str, str] = {
    State.PENDING: "○", State.BLOCKED: "⊘", State.READY: "▷", State.RUNNING: "▶", State.VERIFYING: "◐",
    State.DONE: "✓", State.FAILED: "✗", State.STALE: "↻", State.STOPPED: "■",
}

# A process is at work: a run in one of these has not ended, and neither has the phase
# whose latest run it is (a run's own states share these two words).
LIVE: frozenset[str] = frozenset({State.RUNNING, State.VERIFYING})


def glyph_of(state: str) -> str:
    """The glyph of a state word read from anywhere; "?" for one this console does not know."""
    return GLYPHS.get(state, "?")


@dataclass
class PhaseStatus(Elapsed):
    phase: Phase
    state: State
    reason: str = ""
    run: RunDir | None = None
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    pid: int | None = None
    checks: list[CheckResult] | None = None
    verify: list[CheckResult] | None = None
    service_ready: bool | None = None
    deadline: float | None = None  # stopped at the project's deadline (`run --until`), set for this time
    signal: int | None = None

    @property
    def satisfies_needs(self) -> bool:
        """Whether a later phase that needs this one may start."""
        if self.phase.kind == "service":
            return self.state == State.RUNNING and bool(self.service_ready)
        return self.state == State.DONE

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase.id,
            "title": self.phase.title,
            "kind": self.phase.kind,
            "state": self.state,
            "reason": self.reason,
            "run_id": self.run.run_id if self.run else None,
            "run_dir": str(self.run.path) if self.run else None,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
            "pid": self.pid,
            "service_ready": self.service_ready,
            "deadline": self.deadline,
            "checks": None if self.checks is None else [c.to_json() for c in self.checks],
            "verify": None if self.verify is None else [c.to_json() for c in self.verify],
        }


def derive_states(
    config: Config,
    run_of: Callable[[str], tuple[RunDir | None, Any]],
    stale_reason: Callable[[Phase], str | None],
    record_time: Callable[[str], float | None],
    checks: Mapping[str, list[CheckResult]] | None = None,
    service_ready: Callable[[Phase], tuple[bool, str]] | None = None,
) -> list[PhaseStatus]:
    """One PhaseStatus per phase, in config order. `run_of(id)` gives the latest run and
    its RunStatus; `stale_reason(phase)` says what changed since the phase finished;
    `record_time(id)` is when the phase last finished successfully."""
    checks = checks or {}
    by_id: dict[str, PhaseStatus] = {}
    out: list[PhaseStatus] = []
    for phase in config.phases:
        rd, rs = run_of(phase.id)
        st = PhaseStatus(phase=phase, state=State.READY, run=rd, checks=checks.get(phase.id))
        if rs is not None:
            st.exit_code = rs.exit_code
            st.started_at = rs.started_at
            st.ended_at = rs.ended_at
            st.pid = rs.pid
            st.verify = rs.verify
            st.deadline = getattr(rs, "deadline", None)
            st.signal = getattr(rs, "signal", None)
        deps = [by_id[d] for d in phase.needs if d in by_id]
        run_state = rs.state if rs is not None else None

        if run_state == "running":
            st.state = State.RUNNING
            if phase.kind == "service" and service_ready is not None:
                ok, why = service_ready(phase)
                st.service_ready = ok
                st.reason = "ready" if ok else f"starting: {why}"
        elif run_state == "verifying":
            st.state = State.VERIFYING
            st.reason = "exit 0; running verify checks"
        elif run_state == "succeeded" and phase.kind == "service":
            st.state = State.STOPPED
            st.reason = "service exited (code 0)"
        elif run_state == "succeeded":
            st.state = State.DONE
            stale = _upstream_stale(phase, deps, record_time) or stale_reason(phase)
            if stale:
                st.state = State.STALE
                st.reason = stale
        elif run_state == "failed":
            st.state = State.FAILED
            st.reason = _failure_reason(rs)
        elif run_state == "lost":
            st.state = State.FAILED
            st.reason = "the run vanished without recording an exit (killed with -9 or the machine restarted)"
        elif run_state == "stopped":
            st.state = State.STOPPED
            st.reason = _stop_reason(st)

        if run_state is None:
            missing = [d for d in deps if not d.satisfies_needs]
            if missing:
                st.state = State.PENDING
                st.reason = "waiting for " + ", ".join(f"{d.phase.id} ({d.state})" for d in missing)
            elif st.checks is not None and any(c.blocking for c in st.checks):
                st.state = State.BLOCKED
                st.reason = "failing: " + ", ".join(c.name for c in st.checks if c.blocking)
        by_id[phase.id] = st
        out.append(st)
    return out


def signal_name(number: Any) -> str:
    """'SIGKILL' for 9; the number itself for one this platform does not name."""
    try:
        return signal.Signals(int(number)).name
    except (TypeError, ValueError):
        return f"signal {number}"


def _stop_reason(st: PhaseStatus) -> str:
    """Who stopped it; at a deadline, when, whether it went in its grace, and that a walk
    picks it up again (it is resumable, not failed)."""
    if st.deadline is None:
        return "stopped by the operator"
    when = time.strftime("%H:%M:%S", time.localtime(st.deadline))
    if st.exit_code is None and st.signal == signal.SIGKILL:
        return f"killed at the deadline ({when}): it did not stop within its grace; run --all starts it again"
    return f"stopped at the deadline ({when}); run --all resumes it"


def _failure_reason(rs: Any) -> str:
    if rs.exit_code not in (0, None):
        return f"exit code {rs.exit_code}"
    if rs.exit_code is None and getattr(rs, "signal", None):
        return f"killed by {signal_name(rs.signal)}"
    if getattr(rs, "error", None):
        return str(rs.error)
    if rs.verify:
        bad = [c.name for c in rs.verify if c.status == "fail"]
        if bad:
            return "verify failed: " + ", ".join(bad)
    return "failed"


def _upstream_stale(phase: Phase, deps: list[PhaseStatus], record_time: Callable[[str], float | None]) -> str | None:
    mine = record_time(phase.id)
    for d in deps:
        if d.state == State.STALE:
            return f"upstream {d.phase.id} is stale"
        if d.phase.kind == "service":
            continue
        if d.state in LIVE:
            return f"upstream {d.phase.id} is running again"
        theirs = record_time(d.phase.id)
        if mine is not None and theirs is not None and theirs > mine:
            return f"upstream {d.phase.id} re-ran after this phase finished"
    return None
