"""Every phase, as an operator would walk them: skip what is done (a service that is up counts),
wait for what already runs, start what is ready through the start flow, and wait for it. Up to
`parallel` phases run at once: a phase is ready once every phase it needs is done in this walk,
and ready phases start in config order, so a walk of one at a time goes in config order. Each
step is yielded as data for the caller to word as it happens, while the live phases' logs are
copied to `out` a line at a time under their names.

A phase that does not end well ends the walk's starts: the live ones run to their ends, every
outcome is yielded, and the walk stops, so a rerun resumes there. The project's deadline (`run
--until`, read again before each start) does the same: no phase starts past it, and the phases
its launchers stopped at it end the walk as `DeadlineReached`, resumable.

Phases starting together have their space and GPU checks judged together (`checks.sharing`):
each start gets the claims of the phases starting beside it and of those still running."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from console.core.checks.result import CheckResult
from console.core.checks.sharing import GpuClaim, Sharing, SpaceClaim, device_of, share_of, visible_gpus
from console.core.flow.linefeed import PrefixedLog
from console.core.flow.startflow import Answers, Started, StartRequest, StartResult, drive
from console.core.flow.waiting import LOG_POLL_S, SERVICE_POLL_S, Waited
from console.core.lifecycle.livestats import EventTail
from console.core.lifecycle.project import NEEDS_CHECK, SHARES_CHECK, Project
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.model.config import Config, Phase
from console.core.runs import manager
from console.core.runs.deadline import Deadline
from console.core.runs.rundir import RunDir
from pipeline.cpu_threads import usable_cores

BACKSTOP_S = 15.0  # past the deadline and its grace, a phase still running is stopped by the walk


@dataclass(frozen=True)
class Skipped:
    status: PhaseStatus


@dataclass(frozen=True)
class Attaching:
    """The phase already runs (started elsewhere): the walk waits for it."""

    phase: Phase


@dataclass(frozen=True)
class Entering:
    """The phase is about to start."""

    phase: Phase


@dataclass(frozen=True)
class Halted:
    """This phase's start or run did not end well: the walk starts nothing more."""

    phase: Phase


@dataclass(frozen=True)
class AllDone:
    pass


@dataclass(frozen=True)
class DeadlineReached:
    """The walk ends at the deadline (`at`): `stopped`, the phases it stopped (they keep
    their checkpoints), and `left`, the phases not done, which the next walk takes up."""

    at: float
    stopped: tuple[str, ...]
    left: tuple[str, ...]


Step = Skipped | Attaching | Entering | StartResult | Waited | Halted | AllDone | DeadlineReached


def unknown_overrides(config: Config, names: Mapping[str, str]) -> list[str]:
    """The override names no phase has a check of (a typo in a walk over every phase)."""
    known = {NEEDS_CHECK, SHARES_CHECK} | {c.name for ph in config.phases for c in ph.checks}
    return [n for n in names if n not in known]


def overrides_for(phase: Phase, overrides: Mapping[str, str]) -> dict[str, str]:
    """A walk's overrides spread over the phases that have a check of that name."""
    mine = {NEEDS_CHECK, SHARES_CHECK} | {c.name for c in phase.checks}
    return {k: v for k, v in overrides.items() if k in mine}


def walk_deadline(project: Project, began: float) -> Deadline | None:
    """The project's deadline as it is now (set, moved or cleared by anyone during the walk),
    if it falls after the walk `began`: one that had passed by then is history."""
    due = project.deadline()
    return due if due is not None and due.at > began else None


def _space_needs(results: list[CheckResult] | None) -> list[tuple[int, int]]:
    """(filesystem, bytes) of each space check a start passed (or had overridden)."""
    out = []
    for r in results or []:
        need = r.evidence.get("need_bytes")
        where = r.evidence.get("checked") or r.evidence.get("path")
        if r.kind in ("free_space", "shm_free") and isinstance(need, int) and where and not r.blocking:
            device = device_of(where)
            if device is not None:
                out.append((device, need))
    return out


def _gpu_claim(phase: Phase, results: list[CheckResult] | None, running: bool) -> GpuClaim | None:
    """A phase's claim on the GPUs: the share its command carries, else (as it starts) the
    `gpu_free_memory` need its checks passed with; a running phase's memory is in the
    driver's reading already."""
    gpus = visible_gpus(phase.env)
    share = share_of(phase.argv)
    if share is not None:
        return GpuClaim(phase.id, gpus, share=share, running=running)
    for r in [] if running else results or []:
        need = r.evidence.get("need_bytes")
        if r.kind == "gpu_free_memory" and isinstance(need, int) and not r.blocking:
            spec = next((c for c in phase.checks if c.name == r.name), None)
            wanted = spec.arg.get("gpus") if spec is not None and isinstance(spec.arg, dict) else None
            return GpuClaim(phase.id, tuple(wanted) if isinstance(wanted, list) else gpus, bytes=need)
    return None


@dataclass
class _Live:
    """A run the walk waits on: its log, its events, and the space its start's checks needed."""

    phase: Phase
    run: RunDir
    log: PrefixedLog
    events: EventTail
    space: list[tuple[int, int]] = field(default_factory=list)
    out_device: int | None = None  # the filesystem of its first output
    ready_by: float = 0.0  # a service: monotonic time by which it must answer ready
    next_probe: float = 0.0

    def space_claims(self) -> list[SpaceClaim]:
        """What it still has to write: its events' figure when they give one, else its need
        less what it has written."""
        self.events.poll()
        live = self.events.stats.snapshot()
        remaining = live.remaining_bytes
        if remaining is not None:
            device = self.space[0][0] if self.space else self.out_device
            return [] if device is None else [SpaceClaim(self.phase.id, device, int(remaining), True)]
        written = int(live.bytes_written or 0)
        return [SpaceClaim(self.phase.id, dev, max(0, need - written), True) for dev, need in self.space]


def thread_share(phase: Phase, parallel: int) -> dict[str, str]:
    """A phase of a walk of `parallel` at once: its share of the cores for torch's threads,
    unless its config sets them (a stage alone chooses its own: pipeline/cpu_threads.py)."""
    if parallel <= 1 or "OMP_NUM_THREADS" in phase.env:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, usable_cores() // parallel))}


class _Walk:
    def __init__(self, project: Project, out: TextIO, timeout: float, parallel: int,
                 clock: Callable[[], float]) -> None:
        self.project, self.out, self.timeout, self.parallel, self.clock = project, out, timeout, parallel, clock
        self.began = clock()
        self.settled: set[str] = set()  # done in this walk: skipped, ended well, or a service up
        self.failed: list[str] = []
        self.stopped: list[str] = []  # stopped at the deadline
        self.live: dict[str, _Live] = {}
        self.stop_sent: set[str] = set()

    def open(self) -> list[Phase]:
        """The phases the walk has yet to see to an end, in config order."""
        seen = self.settled | set(self.live) | set(self.failed) | set(self.stopped)
        return [p for p in self.project.config.phases if p.id not in seen]

    def follow(self, phase: Phase, run: RunDir, results: list[CheckResult] | None = None) -> None:
        config = self.project.config
        self.live[phase.id] = _Live(phase, run, PrefixedLog(run.output_log, phase.id), EventTail(run.events_jsonl),
                                    _space_needs(results),
                                    device_of(config.resolve(phase.outputs[0])) if phase.outputs else None,
                                    ready_by=time.monotonic() + self.timeout)

    def look(self) -> Iterator[Step]:
        """Done phases whose needs are settled: skipped. Live ones the walk does not follow yet
        (started before it, or by someone else meanwhile): attached."""
        statuses = {s.phase.id: s for s in self.project.statuses()}
        for phase in self.open():
            st = statuses[phase.id]
            if st.satisfies_needs and all(n in self.settled for n in phase.needs):
                self.settled.add(phase.id)
                yield Skipped(st)
            elif st.state in LIVE and st.run is not None:
                self.follow(phase, st.run)
                yield Attaching(phase)

    def ready(self) -> list[Phase]:
        return [p for p in self.open() if all(n in self.settled for n in p.needs)]

    def may_start(self) -> bool:
        if self.failed or self.stopped or len(self.live) >= self.parallel:
            return False
        due = walk_deadline(self.project, self.began)
        return due is None or not due.passed(self.clock())

    def start(self, overrides: Mapping[str, str], answers: Answers, confirmed: frozenset[str]) -> Iterator[Step]:
        """Start ready phases, in config order, while fewer than `parallel` run."""
        batch: list[tuple[Phase, list[CheckResult] | None]] = []
        for phase in self.ready():
            if not self.may_start():
                return
            yield Entering(phase)
            # rerun: the walk skipped the phase if it were done; it asks nothing of the kind
            request = StartRequest(phase.id, overrides_for(phase, overrides), confirmed=phase.id in confirmed,
                                   rerun=True, sharing=self.sharing(batch) if self.parallel > 1 else None,
                                   env=thread_share(phase, self.parallel))
            result = drive(self.project, request, answers)
            yield result
            if not isinstance(result, Started):
                self.failed.append(phase.id)
                yield Halted(phase)
                return
            self.follow(phase, result.run, result.checks)
            batch.append((phase, result.checks))

    def sharing(self, batch: list[tuple[Phase, list[CheckResult] | None]]) -> Sharing:
        """The claims of the phases running before this round and of those started in it."""
        starting = {phase.id for phase, _ in batch}
        space: list[SpaceClaim] = []
        gpu: list[GpuClaim] = []
        for lv in self.live.values():
            if lv.phase.id not in starting:
                space += lv.space_claims()
                gpu += [c for c in [_gpu_claim(lv.phase, None, running=True)] if c is not None]
        for phase, results in batch:
            space += [SpaceClaim(phase.id, dev, need, False) for dev, need in _space_needs(results)]
            gpu += [c for c in [_gpu_claim(phase, results, running=False)] if c is not None]
        return Sharing(tuple(space), tuple(gpu))

    def watch(self) -> Generator[Step, None, bool]:
        """One look at the live runs: their new log lines, and the runs that ended (or, for a
        service, answered ready). Returns whether one did; sleeps a beat when nothing moved."""
        moved = ended = False
        for lv in list(self.live.values()):
            moved = lv.log.pump(self.out) or moved
            waited = self._outcome(lv)
            if waited is None:
                continue
            moved = ended = True
            del self.live[lv.phase.id]
            yield waited
            if waited.ok:
                self.settled.add(lv.phase.id)
            elif waited.status.deadline is not None:
                self.stopped.append(lv.phase.id)
            else:
                self.failed.append(lv.phase.id)
                yield Halted(lv.phase)
        self._backstop()
        if not moved and self.live:
            time.sleep(LOG_POLL_S)  # wait-ok: the logs grow at the runs' pace; a stat per look
        return ended

    def _outcome(self, lv: _Live) -> Waited | None:
        rs = manager.run_status(lv.run)
        if lv.phase.kind != "service" or rs.state != "running":
            if rs.state in LIVE:
                return None
            lv.log.finish(self.out)
            st = self.project.status(lv.phase.id)
            return Waited(lv.phase, "done" if st.state == State.DONE and lv.phase.kind != "service" else "ended", st)
        now = time.monotonic()
        if now < lv.next_probe:
            return None
        lv.next_probe = now + SERVICE_POLL_S
        if manager.probe_ready(self.project.config, lv.phase, self.project.context(lv.phase))[0]:
            return Waited(lv.phase, "ready", self.project.status(lv.phase.id))
        if now >= lv.ready_by:
            return Waited(lv.phase, "not_ready", self.project.status(lv.phase.id))
        return None

    def _backstop(self) -> None:
        """A phase still running well past the deadline and its grace (its launcher is gone):
        the walk sends the deadline's stop itself, once."""
        due = walk_deadline(self.project, self.began)
        if due is None or self.clock() < due.at + due.grace + BACKSTOP_S:
            return
        for pid, lv in self.live.items():
            rs = manager.run_status(lv.run)
            if pid not in self.stop_sent and rs.state == "running" and due.covers(rs.started_at):
                self.stop_sent.add(pid)
                self.project.stop(pid, grace=due.grace, run_id=lv.run.run_id, deadline=due.at)

    def end(self) -> Step | None:
        """Once nothing runs: every phase done, or the deadline; None to go on (or, after a
        failure, yielded as it came, to stop)."""
        if not self.open() and not self.failed and not self.stopped:
            return AllDone()
        due = walk_deadline(self.project, self.began)
        if self.stopped or (due is not None and due.passed(self.clock())):
            at = due.at if due is not None else max(self.project.status(p).deadline or 0.0 for p in self.stopped)
            left = tuple(p.id for p in self.project.config.phases if p.id not in self.settled)
            return DeadlineReached(at, tuple(self.stopped), left)
        return None


def run_all(project: Project, overrides: Mapping[str, str], answers: Answers, out: TextIO,
            timeout: float, confirmed: frozenset[str] = frozenset(), parallel: int = 1,
            clock: Callable[[], float] = time.time) -> Iterator[Step]:
    """`confirmed`: the destructive phases already confirmed (by id); `timeout`: seconds a
    service may take to become ready; `parallel`: how many phases may run at once."""
    walk = _Walk(project, out, timeout, max(1, parallel), clock)
    changed = True
    while True:
        if changed:
            yield from walk.look()
            yield from walk.start(overrides, answers, confirmed)
        changed = yield from walk.watch()
        if walk.live:
            continue
        yield from walk.look()
        ended = walk.end()
        if ended is not None:
            yield ended
            return
        if walk.failed:
            return
        if not walk.ready():
            yield Halted(walk.open()[0])  # nothing runs and nothing can start: never expected
            return
        changed = True
