"""Starting a phase, as data: every way a start can go is a result, and each question a
result asks (run a done phase again? type the id of a destructive one? override a failing
check?) turns an answer into the next request. The console answers with dialogs, the CLI
with its flags or a prompt; neither decides anything else, so both start phases alike.

The questions come before the checks run, and the checks are journaled once: a destructive
phase's checks run before its confirmation too (a blocked one says so before anyone types
its id), unjournaled, and again, journaled, by the start that follows the answer.
`Project.start` still raises on a blocked or unconfirmed start; this module is the one
place those exceptions become results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from console.core.checks.result import CheckResult
from console.core.checks.sharing import Sharing
from console.core.lifecycle.project import Blocked, NeedsConfirmation, Project
from console.core.lifecycle.reread import ConfigChanged
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.model.config import Phase
from console.core.runs.rundir import RunDir
from console.core.text.errors import Eagle3Error


@dataclass(frozen=True)
class StartRequest:
    """A start and the answers given so far: the overrides (check name -> reason), whether
    the operator typed the id of a destructive phase, and whether a done phase runs again.
    `sharing`: what phases starting beside it take of the disks and GPUs (a parallel walk);
    `env`: what the run's environment adds (a parallel walk's share of the cores)."""

    phase_id: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    confirmed: bool = False
    rerun: bool = False
    sharing: Sharing | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Started:
    request: StartRequest
    run: RunDir
    checks: list[CheckResult] | None  # the pre-flight results the start passed


@dataclass(frozen=True)
class BlockedStart:
    """Failing checks stop the start; `results` holds every check, `failing` the blocking ones."""

    request: StartRequest
    results: list[CheckResult]

    @property
    def failing(self) -> list[CheckResult]:
        return [r for r in self.results if r.blocking]

    def answer(self, overrides: Mapping[str, str] | None) -> StartRequest | None:
        """Check name -> reason for the checks to override; none: the start ends here."""
        if not overrides:
            return None
        return replace(self.request, overrides={**self.request.overrides, **overrides})


@dataclass(frozen=True)
class ConfirmationNeeded:
    """A `confirm: true` phase: the operator reads `summary` (what it runs, deletes and
    writes) and types the phase id."""

    request: StartRequest
    phase: Phase
    summary: str

    def answer(self, confirmed: bool | None) -> StartRequest | None:
        return replace(self.request, confirmed=True) if confirmed else None


@dataclass(frozen=True)
class RerunNeeded:
    """The phase is done; running it again makes `dependents` (the phases that need it) stale."""

    request: StartRequest
    dependents: list[str]

    def answer(self, again: bool | None) -> StartRequest | None:
        return replace(self.request, rerun=True) if again else None


@dataclass(frozen=True)
class AlreadyLive:
    """The phase is running or verifying: nothing to start."""

    request: StartRequest
    status: PhaseStatus


@dataclass(frozen=True)
class Refused:
    """The core said no in an operator's words (an unknown override, a reason left empty, a
    run another console launched meanwhile...)."""

    request: StartRequest
    message: str


Question = RerunNeeded | ConfirmationNeeded | BlockedStart
StartResult = Started | BlockedStart | ConfirmationNeeded | RerunNeeded | AlreadyLive | Refused


def ask(project: Project, request: StartRequest, status: PhaseStatus | None = None) -> StartResult | None:
    """The questions asked before any check runs, or None when the checks may run. Reads
    the phase's status unless given one; a confirmation reads the sizes of what the phase
    deletes and writes. Both do I/O: call it off a UI loop."""
    refused = _reread(project, request)
    if refused is not None:
        return refused
    phase = project.config.phase(request.phase_id)
    st = status if status is not None else project.status(phase.id)
    if st.state in LIVE:
        return AlreadyLive(request, st)
    if st.state == State.DONE and not request.rerun:
        return RerunNeeded(request, [ph.id for ph in project.config.phases if phase.id in ph.needs])
    if phase.confirm and not request.confirmed:
        # Typing the id of a phase that cannot start anyway is a question with no point:
        # its checks say so first (not journaled here: the start that follows journals them).
        results = project.check(phase.id, overrides=request.overrides, journal=False, sharing=request.sharing)
        if any(r.blocking for r in results):
            return BlockedStart(request, results)
        return ConfirmationNeeded(request, phase, project.confirmation_summary(phase.id))
    return None


def attempt(project: Project, request: StartRequest) -> Started | BlockedStart | ConfirmationNeeded | Refused:
    """The checks, then the detached run. Errors that are not an operator's business (a
    state dir on a full disk, a bug) propagate: the caller turns them into its one line."""
    refused = _reread(project, request)
    if refused is not None:
        return refused
    try:
        run = project.start(request.phase_id, overrides=dict(request.overrides) or None,
                            confirmed=request.confirmed, run_env=request.env or None, sharing=request.sharing)
    except Blocked as exc:
        return BlockedStart(request, exc.results)
    except NeedsConfirmation as exc:  # a request that skipped `ask`: the question comes after its checks
        return ConfirmationNeeded(request, exc.phase, exc.summary)
    except Eagle3Error as exc:
        return Refused(request, str(exc))
    return Started(request, run, project.last_checks.get(request.phase_id))


def _reread(project: Project, request: StartRequest) -> Refused | None:
    """The config as its files say now (a console open for days, values saved by `eagle3
    set` in another shell): a start runs what `eagle3 status` reads. Files that no longer
    load refuse the start, since what would run is neither the old values nor the new."""
    try:
        project.reread()
    except ConfigChanged:
        pass  # kept as `broken` until the files load again
    broken = project.source.broken if project.source is not None else None
    if broken is None:
        return None
    return Refused(request, f"{request.phase_id} not started: {broken}; fix the file and start it again")


def step(project: Project, request: StartRequest) -> StartResult:
    """One step of the flow: a question, or the start's own outcome."""
    return ask(project, request) or attempt(project, request)


class Answers(Protocol):
    """How a front end answers the flow's questions; None or False ends the start there."""

    def rerun(self, question: RerunNeeded) -> bool: ...

    def confirm(self, question: ConfirmationNeeded) -> bool: ...

    def override(self, question: BlockedStart) -> Mapping[str, str] | None: ...


def answer_of(answers: Answers, question: Question) -> StartRequest | None:
    if isinstance(question, RerunNeeded):
        return question.answer(answers.rerun(question))
    if isinstance(question, ConfirmationNeeded):
        return question.answer(answers.confirm(question))
    return question.answer(answers.override(question))


def drive(project: Project, request: StartRequest, answers: Answers) -> StartResult:
    """The flow to its end with answers given on the spot (a command line): the last result,
    `Started` or the one that ended it."""
    result = step(project, request)
    while isinstance(result, (RerunNeeded, ConfirmationNeeded, BlockedStart)):
        follow = answer_of(answers, result)
        if follow is None:
            return result
        result = step(project, follow)
    return result
