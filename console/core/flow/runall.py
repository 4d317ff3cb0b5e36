"""Every phase in order: skip what is done (a service that is up counts), wait for what
already runs, else start it through the start flow and wait for it; stop at the first
phase that does not end well, so a rerun resumes there. Each step is yielded as data for
the caller to word as it happens (the log is copied to `out` meanwhile).

The project's deadline (`run --until`, read again before each start) ends the walk: no
phase starts past it, and a phase its launcher stopped at it ends the walk as `DeadlineReached`,
not as a failure: the next walk resumes it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO

from console.core.config.model import Config, Phase
from console.core.lifecycle.project import NEEDS_CHECK, Project
from console.core.flow.startflow import Answers, Started, StartRequest, StartResult, drive
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.flow.waiting import Waited, wait
from console.core.runs.deadline import Deadline


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
    """The walk stops at this phase: its start or its run did not end well."""

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
    known = {NEEDS_CHECK} | {c.name for ph in config.phases for c in ph.checks}
    return [n for n in names if n not in known]


def overrides_for(phase: Phase, overrides: Mapping[str, str]) -> dict[str, str]:
    """A walk's overrides spread over the phases that have a check of that name."""
    mine = {NEEDS_CHECK} | {c.name for c in phase.checks}
    return {k: v for k, v in overrides.items() if k in mine}


def walk_deadline(project: Project, began: float) -> Deadline | None:
    """The project's deadline as it is now (set, moved or cleared by anyone during the walk),
    if it falls after the walk `began`: one that had passed by then is history."""
    due = project.deadline()
    return due if due is not None and due.at > began else None


def _left(project: Project) -> tuple[str, ...]:
    return tuple(s.phase.id for s in project.statuses() if not s.satisfies_needs)


def run_all(project: Project, overrides: Mapping[str, str], answers: Answers, out: TextIO,
            timeout: float, confirmed: frozenset[str] = frozenset(),
            clock: Callable[[], float] = time.time) -> Iterator[Step]:
    """`confirmed`: the destructive phases already confirmed (by id); `timeout`: seconds a
    service may take to become ready."""
    began = clock()
    for phase in project.config.phases:
        st = project.status(phase.id)
        if st.state == State.DONE or (phase.kind == "service" and st.state == State.RUNNING and st.service_ready):
            yield Skipped(st)
            continue
        if st.state in LIVE and st.run is not None:
            yield Attaching(phase)
            waited = wait(project, phase, st.run, out, timeout)
            yield waited
            if waited.status.deadline is not None:
                yield DeadlineReached(waited.status.deadline, (phase.id,), _left(project))
                return
            if not waited.ok:
                yield Halted(phase)
                return
            continue
        due = walk_deadline(project, began)
        if due is not None and due.passed(clock()):
            yield DeadlineReached(due.at, (), _left(project))
            return
        yield Entering(phase)
        # rerun: the walk skipped the phase if it were done; it asks nothing of the kind
        request = StartRequest(phase.id, overrides_for(phase, overrides), confirmed=phase.id in confirmed,
                               rerun=True)
        result = drive(project, request, answers)
        yield result
        if not isinstance(result, Started):
            yield Halted(phase)
            return
        waited = wait(project, phase, result.run, out, timeout)
        yield waited
        if waited.status.deadline is not None:
            yield DeadlineReached(waited.status.deadline, (phase.id,), _left(project))
            return
        if not waited.ok:
            yield Halted(phase)
            return
    yield AllDone()
