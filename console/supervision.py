"""What the launcher does for its run besides running it, loaded once the phase has started
(the config, the checks and the notifier cost a launcher about 0.3 s it need not wait for):
while the phase runs, the stall watch; once it has ended with 0, its `verify` checks and
provenance; and, whatever the end, the `ended`/`failed` notification. A run is finished properly
whether or not anyone is watching.

Everything it has to say goes to the launcher's stderr, which the spawner pointed at `output.log`."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.registry import run_checks
from console.core.checks.result import CheckResult, redact_results
from console.core.config.loader import load_config
from console.core.lifecycle.notify import Notifier, ended_notice
from console.core.lifecycle.snapshot import SnapshotBuilder
from console.core.lifecycle.stall import StallWatch, stall_after
from console.core.lifecycle.state import PhaseStatus, State, derive_states
from console.core.model.config import CheckSpec
from console.core.records.journal import Journal
from console.core.records.provenance import record_phase
from console.core.runs import deadline as deadlines
from console.core.runs.launcher_output import journal, log, redactor_of
from console.core.runs.manager import run_status
from console.core.runs.rundir import VERIFYING, PidInfo, RunDir

# The three seams to the config, the checks and provenance; tests replace them.

def load_phase_config(argv: dict[str, Any]) -> tuple[Any, Any]:
    """The config as it is now (reloaded from its file with the run's --set overrides) and
    the run's phase in it."""
    # saved={}: the run's overrides already hold the saved ones it started with.
    config = load_config(argv["config_path"], argv.get("overrides") or {}, saved={})
    return config, config.phase(argv["phase"])


def run_verify_checks(specs: list[Any], config: Any, phase: Any) -> list[CheckResult]:
    return run_checks(specs, CheckContext(config, phase))


def record_provenance(config: Any, phase: Any, run_id: str) -> None:
    record_phase(config, phase, run_id)


def _failed(name: str, kind: str, message: str) -> CheckResult:
    return CheckResult(name=name, kind=kind, severity="error", status="fail", message=message)


def finish(rd: RunDir, argv: dict[str, Any], stopping: Callable[[], bool] = lambda: False) -> str:
    """After exit 0: run the phase's verify checks, write verify.json, and record
    provenance when they pass. Returns "passed", "failed" or "none" (no verify checks)."""
    redactor = redactor_of(argv)
    real = redactor.restore(argv)
    specs = [CheckSpec.from_json(d) for d in real.get("verify") or []]
    config = phase = None
    load_error = None
    try:
        config, phase = load_phase_config(real)
    except Exception as e:  # noqa: BLE001 - any failure to load is the verification's failure
        load_error = f"cannot reload the config {argv.get('config_path')}: {e}"

    outcome = "none"
    if specs:
        rd.mark(VERIFYING)
        log(redactor.text(f"verifying: {', '.join(s.name for s in specs)}"))
        if load_error is not None:
            results = [_failed("config", "config", load_error)]
        else:
            try:
                results = list(run_verify_checks(specs, config, phase))
            except Exception as e:  # noqa: BLE001
                results = [_failed("verify", "verify", f"the verify checks crashed: {type(e).__name__}: {e}")]
        results = redact_results(results, redactor)
        rd.write_verify(results)
        passed = not any(r.blocking for r in results)
        outcome = "passed" if passed else "failed"
        for r in results:
            log(f"  {r.status:4} {r.name}: {r.message}")
        log(f"verify {outcome}")
        journal(rd, "verify", redactor, phase=rd.phase_id, run_id=rd.run_id, passed=passed,
                 results=[r.to_json() for r in results])

    if outcome == "failed":
        return outcome
    if stopping():
        log("stopped during verification: provenance not recorded")
    elif load_error is not None:
        log(f"provenance not recorded: {redactor.text(load_error)}")
    else:
        try:
            record_provenance(config, phase, rd.run_id)
        except Exception as e:  # noqa: BLE001 - provenance is advisory, the run stands
            log(f"provenance not recorded: {type(e).__name__}: {redactor.text(str(e))}")
    return outcome


STALL_POLL = (0.25, 5.0)  # seconds between looks for a stall: a quarter of stall_after, within these


class _OneRun:
    """What a SnapshotBuilder reads of a project, for the one run a launcher owns."""

    def __init__(self, status: Any) -> None:
        self.status = status

    def statuses(self, checks: Any = None) -> list[Any]:
        return [self.status]


def watch_stalls(rd: RunDir, argv: dict[str, Any], started: float, done: threading.Event) -> None:
    """Until `done`: look at the run as a console's snapshot does, and let a StallWatch
    journal and send each silence longer than the phase's `stall_after` (once, with any
    console that watches too). Never raises: its first error is logged and ends the watch."""
    redactor = redactor_of(argv)
    try:
        config, phase = load_phase_config(redactor.restore(argv))
        after = stall_after(phase)
        if not after:
            return
        journal = Journal(rd.state_dir, redactor)
        watch = StallWatch(journal, Notifier(config, journal))
        # With its pid (written before the phase started), as a console reads the run.
        running = PhaseStatus(phase=phase, state=State.RUNNING, run=rd, started_at=started, pid=os.getpid())
        builder = SnapshotBuilder(_OneRun(running))
        every = min(STALL_POLL[1], max(STALL_POLL[0], after / 4))
        while not done.wait(every):
            snap = builder.build()
            watch.update(snap.phases, now=snap.t)
    except Exception as e:  # noqa: BLE001 - the watch is advisory; the run goes on without it
        log(redactor.text(f"stall watch ended: {type(e).__name__}: {e}"))


DEADLINE_POLL = 1.0  # seconds between looks at the project's deadline file


def watch_deadline(rd: RunDir, started: float, done: threading.Event,
                   stop: Callable[[deadlines.Deadline], None]) -> None:
    """Until `done`: the project's deadline, read again each second (one set, moved or cleared
    after the run began counts); when one that covers this run comes, `stop(deadline)`, once.
    An unreadable deadline file is logged once and looked at again; nothing else ends the watch."""
    said = None
    while True:
        try:
            due = deadlines.read(rd.state_dir)
        except deadlines.DeadlineError as e:
            if str(e) != said:
                log(f"deadline not read: {e}")
                said = str(e)
            due = None
        now = time.time()
        if due is not None and due.covers(started):
            if due.passed(now):
                try:
                    stop(due)
                except Exception as e:  # noqa: BLE001 - the run goes on; its log says why it was not stopped
                    log(f"the deadline's stop failed: {type(e).__name__}: {e}")
                return
            wait = min(DEADLINE_POLL, due.left(now))
        else:
            wait = DEADLINE_POLL
        if done.wait(wait):
            return


class _Ended(RunDir):
    """The run as everyone reads it once its launcher has exited."""

    def read_pid(self) -> PidInfo | None:
        return None


def final_status(rd: RunDir, config: Any, phase: Any) -> Any:
    """The PhaseStatus a console derives for this ended run (state done/failed/stopped and
    its reason), by the core's own derivation."""
    rs = run_status(_Ended(rd.path))
    return derive_states(replace(config, phases=(phase,)), lambda _id: (rd, rs),
                         lambda _phase: None, lambda _id: None)[0]


def notify_end(rd: RunDir, argv: dict[str, Any]) -> None:
    """Sends `ended` or `failed` for the run that just ended (once, whoever else sees it).
    A config that no longer loads or a notifier that fails costs the notification only."""
    redactor = redactor_of(argv)
    try:
        config, phase = load_phase_config(redactor.restore(argv))
        notifier = Notifier(config, Journal(rd.state_dir, redactor))
        if not (notifier.specs(rd.phase_id, "ended") or notifier.specs(rd.phase_id, "failed")):
            return
        st = final_status(rd, config, phase)
        event, summary = ended_notice(st)
        notifier.fire(event, rd.phase_id, st.state, rd.run_id, redactor.text(summary))
    except Exception as e:  # noqa: BLE001 - the run is over and on record whatever happens here
        log(redactor.text(f"notifications not sent: {type(e).__name__}: {e}"))
