"""`eagle3 run`: start a phase once its checks pass (and wait for it with --wait), or walk
every phase in order with --all. The start flow's questions (rerun a done phase, confirm a
destructive one) are answered by the flags, else at a prompt on a terminal, else refused with
the flag a script must give."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from console.cli.edge import EXIT_DEADLINE, EXIT_FAIL, EXIT_OK, EXIT_USAGE, UsageError
from console.cli.printing import fmt_duration, print_results
from console.core.flow.runall import (
    AllDone,
    Attaching,
    DeadlineReached,
    Entering,
    Halted,
    Skipped,
    run_all,
    unknown_overrides,
)
from console.core.flow.startflow import (
    AlreadyLive,
    BlockedStart,
    ConfirmationNeeded,
    Refused,
    RerunNeeded,
    Started,
    StartRequest,
    StartResult,
    drive,
)
from console.core.flow.waiting import Waited, wait
from console.core.lifecycle.project import Project, override_hint
from console.core.lifecycle.state import State
from console.core.model.config import MAX_PARALLEL, Phase
from console.core.runs.deadline import MAX_GRACE, DeadlineError, parse_until
from console.core.runs.procs import STOP_GRACE
from console.core.runs.rundir import RunDir

HELP = "start a phase (or --all, in order) after its checks pass"
EPILOG = f"""\
deadline (--until): every phase still running at it gets the stop `eagle3 stop` and the
console's `s` send (SIGTERM to its process group, SIGKILL after --grace), from its own
launcher, so the deadline holds with this command gone (an SSH drop). A stopped phase keeps
its checkpoint, reads `stopped` (resumable, not failed) in `eagle3 status`, and the next
`eagle3 run CONFIG --all` resumes it. No phase starts past the deadline. The deadline is kept
in the state dir until --until off clears it or another --until replaces it.

exit codes: {EXIT_OK} every phase asked for ended well; {EXIT_FAIL} a phase was blocked or
failed (or a question went unanswered); {EXIT_USAGE} bad arguments or config; {EXIT_DEADLINE} stopped at the
deadline (nothing failed; rerun to resume); 130 interrupted (the phases go on)."""


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("phase", nargs="?")
    c.add_argument("--all", action="store_true", help="walk every phase in order: check, run, wait, verify, next")
    c.add_argument("--override", action="append", default=[], metavar="CHECK",
                   help="override a failing check for this run (needs --reason)")
    c.add_argument("--reason", help="why the override is safe; recorded in the journal")
    c.add_argument("--wait", action="store_true", help="stream the log and wait for the phase to end")
    c.add_argument("--rerun", action="store_true",
                   help="run a phase that is done again (asked on a terminal; needed without one)")
    c.add_argument("--confirm", metavar="PHASE_ID", action="append", default=[],
                   help="confirm a `confirm: true` phase without a prompt (type its id)")
    c.add_argument("--timeout", type=float, default=600.0,
                   help="with --all: seconds to wait for a service to become ready (default 600)")
    c.add_argument("--parallel", type=int, metavar="N",
                   help=f"with --all: run up to N ready phases at once (1 to {MAX_PARALLEL}; default the "
                        "config's `parallel:`, else 1)")
    c.add_argument("--until", metavar="WHEN",
                   help="a deadline: a duration from now (8m30s, 2h) or a time of day (14:05); "
                        "`off` clears the one set before")
    c.add_argument("--grace", type=float, default=STOP_GRACE, metavar="S",
                   help=f"with --until: seconds from SIGTERM to SIGKILL at the deadline (default {STOP_GRACE:g})")


class _Answers:
    """The command line's answers to the start flow: what its flags said up front (--rerun,
    --confirm, --override), else a prompt on a terminal, else a refusal naming the flag a
    script must give. `code`: the exit code of the question left unanswered."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.code = EXIT_FAIL

    def rerun(self, question: RerunNeeded) -> bool:
        pid, after = question.request.phase_id, question.dependents
        tail = f"; phases that need it ({', '.join(after)}) become stale" if after else ""
        if not sys.stdin.isatty():
            print(f"eagle3: phase {pid} is done{tail}. To run it again: "
                  f"eagle3 run {self.args.config} {pid} --rerun", file=sys.stderr)
            self.code = EXIT_USAGE
            return False
        try:
            answer = input(f"phase {pid} is done{tail}. Run it again? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            print(f"eagle3: {pid} not run", file=sys.stderr)
            self.code = EXIT_FAIL
            return False
        return True

    def confirm(self, question: ConfirmationNeeded) -> bool:
        pid = question.request.phase_id
        self.code = EXIT_FAIL
        if not sys.stdin.isatty():
            print(f"eagle3: phase {pid} needs confirmation:\n{question.summary}\n"
                  f"rerun with --confirm {pid} to confirm", file=sys.stderr)
            return False
        print(f"phase {pid} needs confirmation:\n{question.summary}", file=sys.stderr)
        return input(f"type the phase id ({pid}) to go ahead: ").strip() == pid

    def override(self, question: BlockedStart) -> None:
        self.code = EXIT_FAIL
        return None  # a command line gives its overrides up front


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
    if args.all == bool(args.phase):
        raise UsageError("run: name one PHASE or give --all")
    if args.override and not args.reason:
        raise UsageError("run: --override needs --reason TEXT (it is recorded in the journal)")
    if args.parallel is not None and not (args.all and 1 <= args.parallel <= MAX_PARALLEL):
        raise UsageError(f"run: --parallel N is for --all, N from 1 to {MAX_PARALLEL}")
    overrides = {name: args.reason for name in args.override}
    answers = _Answers(args)
    _deadline(project, args, out)
    if args.all:
        return _run_all(project, args, overrides, answers, out)
    request = StartRequest(args.phase, overrides, confirmed=args.phase in args.confirm, rerun=args.rerun)
    result = drive(project, request, answers)
    code = _report_start(result, answers, out)
    if code != EXIT_OK or not args.wait or not isinstance(result, Started):
        return code
    return _wait(project, project.config.phase(args.phase), result.run, out, args)


def _deadline(project: Project, args: argparse.Namespace, out: TextIO) -> None:
    """Set (or clear) the project's deadline as --until says, else name the one that holds."""
    now = time.time()
    if args.until is None:
        due = project.deadline()
        if due is not None and not due.passed(now):
            print(f"deadline {due.clock()} (in {fmt_duration(due.left(now))}, set by {due.by}: {due.how}) "
                  f"holds; --until off clears it", file=out)
        return
    if args.until.strip().lower() in ("off", "none"):
        print("deadline cleared" if project.clear_deadline() else "no deadline was set", file=out)
        return
    if not 0 <= args.grace <= MAX_GRACE:
        raise UsageError(f"run: --grace {args.grace:g}: seconds from 0 to {MAX_GRACE:g}")
    try:
        at = parse_until(args.until, now)
    except DeadlineError as e:
        raise UsageError(f"run: {e}") from None
    due = project.set_deadline(at, f"eagle3 run --until {args.until}", grace=args.grace)
    print(f"deadline {due.clock()} (in {fmt_duration(due.left(now))}): phases still running then are "
          f"stopped (SIGTERM, SIGKILL after {due.grace:g}s) and keep their checkpoints", file=out)


def _report_start(result: StartResult, answers: _Answers, out: TextIO) -> int:
    pid = result.request.phase_id
    if isinstance(result, Started):
        print(f"started {pid}: run {result.run.run_id} (log: {result.run.output_log})", file=out)
        return EXIT_OK
    if isinstance(result, BlockedStart):
        print_results(pid, result.results, sys.stderr)
        print(f"eagle3: {pid} is blocked; {override_hint([r.name for r in result.failing])}", file=sys.stderr)
        return EXIT_FAIL
    if isinstance(result, AlreadyLive):
        st = result.status
        print(f"eagle3: phase {pid} is already {st.state}" + (f" (pid {st.pid})" if st.pid else "")
              + "; stop it first or wait", file=sys.stderr)
        return EXIT_FAIL
    if isinstance(result, Refused):
        print(f"eagle3: {result.message}", file=sys.stderr)
        return EXIT_FAIL
    return answers.code  # a question left unanswered said why as it was asked


def _report_wait(waited: Waited, args: argparse.Namespace, out: TextIO) -> int:
    pid, st = waited.phase.id, waited.status
    if waited.outcome == "ready":
        print(f"{pid} is ready", file=out)
        return EXIT_OK
    if waited.outcome == "done":
        print(f"{State.DONE.glyph} {pid} done (exit {st.exit_code}, {fmt_duration(st.duration_s)})", file=out)
        return EXIT_OK
    if st.deadline is not None:
        print(f"{State.STOPPED.glyph} {pid} {st.reason} (after {fmt_duration(st.duration_s)})", file=out)
        return EXIT_DEADLINE
    if waited.outcome == "not_ready":
        print(f"eagle3: service {pid} not ready after {args.timeout:.0f}s; it keeps running", file=sys.stderr)
    elif waited.phase.kind == "service":
        print(f"eagle3: service {pid} ended before it became ready ({st.state}: {st.reason})", file=sys.stderr)
    else:
        if st.verify:
            print_results(f"{pid} verify", st.verify, sys.stderr)
        print(f"eagle3: {pid} {st.state}: {st.reason}", file=sys.stderr)
    return EXIT_FAIL


def _report_deadline(step: DeadlineReached, args: argparse.Namespace) -> int:
    when = time.strftime("%H:%M:%S", time.localtime(step.at))
    stopped = f"stopped {', '.join(step.stopped)}, which keep their checkpoints; " if step.stopped else ""
    left = f"not done: {', '.join(step.left)}. " if step.left else ""
    print(f"eagle3: the deadline ({when}) has come: {stopped}{left}"
          f"`eagle3 run {args.config} --all` resumes", file=sys.stderr)
    return EXIT_DEADLINE


def _stopped_waiting(phase: Phase, args: argparse.Namespace) -> None:
    if phase.kind != "service":
        print(f"\n(stopped waiting; {phase.id} goes on. eagle3 stop {args.config} {phase.id} stops it)",
              file=sys.stderr)


def _wait(project: Project, phase: Phase, run: RunDir, out: TextIO, args: argparse.Namespace) -> int:
    try:
        waited = wait(project, phase, run, out, args.timeout)
    except KeyboardInterrupt:
        _stopped_waiting(phase, args)
        raise
    return _report_wait(waited, args, out)


def _run_all(project: Project, args: argparse.Namespace, overrides: dict[str, str], answers: _Answers,
             out: TextIO) -> int:
    unknown = unknown_overrides(project.config, overrides)
    if unknown:
        raise UsageError(f"run --all: --override {unknown[0]}: no phase has a check of that name")
    parallel = args.parallel or project.config.parallel
    if parallel > 1:
        print(f"up to {parallel} phases at once", file=out)
    failure = EXIT_OK  # the first failure's code: it wins over the deadline's
    live: dict[str, Phase] = {}  # the phases whose runs the walk waits on
    try:
        for step in run_all(project, overrides, answers, out, args.timeout, frozenset(args.confirm), parallel):
            if isinstance(step, Skipped):
                print(f"{State.DONE.glyph} {step.status.phase.id}: {step.status.state}, skipped", file=out)
            elif isinstance(step, Attaching):
                print(f"{step.phase.id} is already running; waiting for it", file=out)
                live[step.phase.id] = step.phase
            elif isinstance(step, Entering):
                print(f"── {step.phase.id}: {step.phase.title}", file=out)
            elif isinstance(step, Waited):
                live.pop(step.phase.id, None)
                code = _report_wait(step, args, out)
                failure = failure or (code if code != EXIT_DEADLINE else EXIT_OK)
            elif isinstance(step, Halted):
                failure = failure or EXIT_FAIL
                going = f"; starting nothing more while {', '.join(live)} run{'s' if len(live) == 1 else ''} on" if live else ""
                print(f"eagle3: stopped at {step.phase.id}; fix it and rerun `eagle3 run {args.config} --all` "
                      f"to resume from there{going}", file=sys.stderr)
            elif isinstance(step, AllDone):
                print("all phases done", file=out)
                return EXIT_OK
            elif isinstance(step, DeadlineReached):
                return failure or _report_deadline(step, args)
            else:
                code = _report_start(step, answers, out)
                failure = failure or code
                if isinstance(step, Started):
                    live[step.request.phase_id] = project.config.phase(step.request.phase_id)
    except KeyboardInterrupt:
        for phase in live.values():
            _stopped_waiting(phase, args)
        raise
    return failure
