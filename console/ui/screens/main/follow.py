"""What the console knows of the phases between two looks: the latest snapshot, the live
figures, which phases are stalled, and the check results an operator or the background
pre-flight last got. Kept on the UI loop; the poller threads read it (each attribute is
replaced whole, never mutated in place), and the panels draw from it."""

from __future__ import annotations

from console.core.checks.result import CheckResult
from console.core.flow.watch import Look
from console.core.lifecycle.livestats import LiveSnapshot
from console.core.lifecycle.snapshot import Snapshot
from console.core.lifecycle.stall import StallAlert
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.runs.deadline import Deadline


class PhaseFollow:
    """The phases as the latest look saw them, and what happened to them since the start."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.deadline: Deadline | None = None  # the project's, as the last look read it
        self.looks = 0  # looks taken (tests wait for the last one posted)
        self.statuses: list[PhaseStatus] = []
        self.by_id: dict[str, PhaseStatus] = {}
        self.stats: dict[str, LiveSnapshot] = {}
        self.stalled: set[str] = set()
        self.warnings: dict[str, int] = {}  # warnings each phase's latest run emitted, where any
        self.first_unit: set[str] = set()  # silent past stall_after, busy on their first unit
        self.sessions: dict[int, str] = {}  # a launcher's session -> its phase, for the GPU owners
        self.ended: list[tuple[str, str]] = []
        self.alerts: list[StallAlert] = []

    def take(self, look: Look) -> None:
        self.looks += 1
        snap = self.snapshot = look.snapshot
        self.statuses = snap.statuses
        self.by_id = {s.phase.id: s for s in self.statuses}
        self.stats = snap.stats
        self.deadline = look.deadline
        self.stalled = {pv.id for pv in snap.phases if pv.stalled}
        self.warnings = {pid: live.warnings for pid, live in self.stats.items() if live.warnings}
        self.first_unit = {pv.id for pv in snap.phases if pv.awaiting_first_unit}
        self.sessions = snap.sessions()
        self.ended = [*self.ended, *((st.phase.id, st.state) for st in look.ended)]
        self.alerts = [*self.alerts, *look.alerts]

    def running(self) -> list[PhaseStatus]:
        return [s for s in self.statuses if s.state in LIVE]

    def worth_opening(self) -> str | None:
        """What the console opens on: the running phase, else the first that is not done, else
        the one that ended last (a finished walk opens on its last result, not its first step)."""
        pick = next((s for s in self.statuses if s.state in LIVE), None) or next(
            (s for s in self.statuses if s.state != State.DONE), None) or max(
            self.statuses, key=lambda s: s.ended_at or 0.0, default=None)
        return None if pick is None else pick.phase.id

    def next_live(self, selected: str | None) -> str | None:
        """The next running phase after `selected` (in config order, round again)."""
        live = [s.phase.id for s in self.running()]
        if not live:
            return None
        ids = [s.phase.id for s in self.statuses]
        here = ids.index(selected) if selected in ids else -1
        return next((p for p in live if ids.index(p) > here), live[0])

    def log_path(self, phase_id: str) -> str | None:
        st = self.by_id.get(phase_id)
        return str(st.run.output_log) if st is not None and st.run is not None else None


class CheckMemory:
    """The check results each phase last got in this console. `checks` (pre-flight only)
    is what the watch judges ready and blocked by; `shown` is what the detail shows, a
    verify's included."""

    def __init__(self) -> None:
        self.checks: dict[str, list[CheckResult]] = {}  # replaced, never mutated: pollers read it
        self.shown: dict[str, tuple[str, list[CheckResult]]] = {}

    def remember(self, phase_id: str, kind: str, results: list[CheckResult]) -> None:
        if kind in ("check", "preflight"):
            self.checks = {**self.checks, phase_id: results}
        self.shown[phase_id] = ("verify" if kind == "verify" else "check", results)

    def forget(self) -> None:
        """The config changed: results judged under the old values no longer hold."""
        self.checks, self.shown = {}, {}
