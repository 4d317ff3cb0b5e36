"""Watching a project from a console: each look at its phases says which ended and which
fell silent since the last look, sends the notification a lost run's launcher could not,
and (on the first look) finds the checks each running phase's start passed in the journal.
Also the readings a console shows beside the phases: which phase owns each GPU process,
and how much room the running phases still need on each volume.

Everything here does I/O and keeps state between looks: one `PhaseWatch` per console,
called from one thread."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from console.core.checks.result import CheckResult
from console.core.lifecycle.notify import Notifier, ended_notice
from console.core.lifecycle.project import Project
from console.core.lifecycle.reread import ConfigChanged
from console.core.lifecycle.snapshot import Snapshot, SnapshotBuilder, SpaceNeed
from console.core.lifecycle.stall import StallAlert, StallWatch
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.records.journal import Journal
from console.core.runs.deadline import Deadline, DeadlineError
from console.core.runs.manager import run_status
from console.core.telemetry.history import DiskForecast, VolumeForecast
from console.core.telemetry.ownership import owner_map
from console.core.telemetry.samples import DiskReading, GpuReading


@dataclass
class Look:
    """A fresh snapshot, the phases that ended or stalled since the last look, and (on the
    first look only) the checks each running phase's start passed, from the journal."""

    snapshot: Snapshot
    ended: list[PhaseStatus] = field(default_factory=list)
    alerts: list[StallAlert] = field(default_factory=list)
    attach_checks: dict[str, list[CheckResult]] = field(default_factory=dict)
    reread: bool = False  # the config's files changed and this look is under the new config
    config_error: str | None = None  # they changed and do not load (said once per change)
    deadline: Deadline | None = None  # the project's deadline, passed or not (none when unreadable)


def checks_from_journal(journal: Journal, phase_id: str, started_at: float | None) -> list[CheckResult] | None:
    """The pre-flight results the latest start of a phase passed (its last `checks` record
    before the run started), so a console that attaches later can show them."""
    try:
        records = journal.read(phase=phase_id, limit=200, events={"checks"})
    except Exception:  # noqa: BLE001 - context is a nicety; never block the attach
        return None
    for rec in reversed(records):
        t = rec.get("t")
        if started_at is not None and isinstance(t, (int, float)) and t > started_at + 5:
            continue
        try:
            return [CheckResult.from_json(r) for r in rec.get("results") or []]
        except Exception:  # noqa: BLE001
            return None
    return None


class PhaseWatch:
    def __init__(self, project: Project, clock: Callable[[], float] = time.time) -> None:
        self.project = project
        self.builder = SnapshotBuilder(project, clock=clock)
        self.notifier = Notifier(project.config, project.journal)
        self.stall_watch = StallWatch(project.journal, self.notifier)
        self._prev_states: dict[str, str] | None = None
        self._prev_stalled: set[str] = set()

    def look(self, checks: Mapping[str, list[CheckResult]]) -> Look:
        """`checks`: the latest check results the console holds per phase (they decide
        ready or blocked); a running phase found here is not looked up in the journal.
        The config is read again first when its files changed, so the states are judged
        as `eagle3 status` judges them."""
        reread, config_error = self._reread()
        snap = self.builder.build(checks=checks)
        # Journals and sends each silence once, whether this console or the run's launcher
        # (or another console) sees it first; what this console shows is its own (below).
        self.stall_watch.update(snap.phases, now=snap.t)
        try:
            deadline = self.project.deadline()
        except DeadlineError:
            deadline = None  # a file that is not one: `eagle3 run` names it; the launchers log it
        look = Look(snap, reread=reread, config_error=config_error, deadline=deadline)
        if self._prev_states is None:
            for pv in snap.phases:
                if pv.status.state in LIVE and pv.id not in checks:
                    found = checks_from_journal(self.project.journal, pv.id, pv.status.started_at)
                    if found:
                        look.attach_checks[pv.id] = found
        else:
            for pv in snap.phases:
                if self._prev_states.get(pv.id) in LIVE and pv.status.state not in LIVE:
                    look.ended.append(pv.status)
                if pv.stalled and pv.id not in self._prev_stalled and pv.status.run is not None:
                    look.alerts.append(StallAlert(pv.id, pv.status.run.run_id, pv.silent_s or 0.0, pv.stall_after))
        self._prev_states = {pv.id: pv.status.state for pv in snap.phases}
        self._prev_stalled = {pv.id for pv in snap.phases if pv.stalled}
        for st in look.ended:
            # A run's launcher sends its end; one that died (lost) cannot, so the console does.
            if st.run is not None and run_status(st.run).state == "lost":
                event, summary = ended_notice(st)
                self.notifier.fire(event, st.phase.id, st.state, st.run.run_id, summary)
        return look

    def _reread(self) -> tuple[bool, str | None]:
        try:
            changed = self.project.reread()
        except ConfigChanged as e:
            return False, str(e)
        if changed:  # notifications and stall records follow the new config and state dir
            self.notifier = Notifier(self.project.config, self.project.journal)
            self.stall_watch.journal, self.stall_watch.notifier = self.project.journal, self.notifier
        return changed, None

    def space_needs(self, snap: Snapshot | None, forecast: DiskForecast) -> dict[str, SpaceNeed]:
        """{volume: bytes the running phases still have to write there}."""
        return self.builder.space_needs(snap, forecast.volume_for) if snap is not None else {}


def gpu_owners(reading: GpuReading, sessions: Mapping[int, str]) -> dict[int, str]:
    """{GPU process pid: phase id} for the processes a running phase started; `sessions`
    is the snapshot's {launcher pid: phase id}."""
    owner = owner_map(sessions)
    owners: dict[int, str] = {}
    for g in reading.gpus:
        for p in g.processes:
            ph = owner(p.pid)
            if ph is not None:
                owners[p.pid] = ph
    return owners


def disk_outlook(forecast: DiskForecast, reading: DiskReading) -> dict[str, VolumeForecast]:
    """Feeds a disk reading to the forecast; {path: when it fills at the current rate}."""
    forecast.update(reading)
    return {f.path: f for f in forecast.forecasts()}


class PreflightSchedule:
    """Which phases to pre-flight now: those that could start next (ready or blocked), each
    at most once every `every` seconds (0: never), so the checklist says why one is blocked
    before anyone presses r."""

    def __init__(self, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}

    def due(self, statuses: Iterable[PhaseStatus]) -> list[str]:
        if self.every <= 0:
            return []
        now = self.clock()
        out = []
        for st in statuses:
            last = self._last.get(st.phase.id)
            if st.state in (State.READY, State.BLOCKED) and (last is None or now - last >= self.every):
                self._last[st.phase.id] = now
                out.append(st.phase.id)
        return out
