"""The process that owns one run: `python -m console.launcher RUN_DIR [--lock-fd N]`.

It lives in its own session, started by `manager.start_run`, so that a phase outlives the
console or CLI that started it (and the SSH session around them). It holds the phase lock
it inherited, writes `pid` before the phase starts, runs the phase with its output in
`output.log`, writes `exit` atomically, and then verifies, records provenance, journals
the end and sends the config's `ended`/`failed` notifications: a run is finished properly
whether or not anyone is watching. While the phase runs, a thread watches it for a stall
(`stall_after`), journals it and sends `stalled`, as an open console would.

Everything it has to say goes to its stderr, which the spawner pointed at `output.log`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.registry import run_checks
from console.core.checks.result import CheckResult, redact_results
from console.core.config.loader import load_config
from console.core.config.model import CheckSpec
from console.core.journal import Journal
from console.core.notify import Notifier, ended_notice
from console.core.provenance import record_phase
from console.core.redaction import Redactor
from console.core.runs import procs
from console.core.runs.manager import run_status
from console.core.runs.rundir import RUN_DIR_ENV, VERIFYING, ExitInfo, PidInfo, RunDir
from console.core.snapshot import SnapshotBuilder
from console.core.stall import StallWatch, stall_after
from console.core.state import PhaseStatus, derive_states
from pipeline.events import ENV_VAR as EVENTS_ENV


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[eagle3 {stamp}] {msg}", file=sys.stderr, flush=True)


def _redactor(argv: dict[str, Any]) -> Redactor:
    """Hides the run's `${env:...}` values (named in argv.json) in what the launcher writes."""
    return Redactor(argv.get("secret_env") or ())


def _journal(rd: RunDir, event: str, redactor: Redactor | None = None, **fields: Any) -> None:
    """Journal from the launcher; a full disk must not turn a finished run into a crash."""
    try:
        Journal(rd.state_dir, redactor).append(event, **fields)
    except OSError as e:
        log(f"could not write the journal {rd.state_dir / 'journal.jsonl'}: {e}")


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
    redactor = _redactor(argv)
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
        _journal(rd, "verify", redactor, phase=rd.phase_id, run_id=rd.run_id, passed=passed,
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
STALL_JOIN_S = 2.0  # how long the end of a run waits for the stall watch's last look


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
    redactor = _redactor(argv)
    try:
        config, phase = load_phase_config(redactor.restore(argv))
        after = stall_after(phase)
        if not after:
            return
        journal = Journal(rd.state_dir, redactor)
        watch = StallWatch(journal, Notifier(config, journal))
        # With its pid (written before the phase started), as a console reads the run.
        running = PhaseStatus(phase=phase, state="running", run=rd, started_at=started, pid=os.getpid())
        builder = SnapshotBuilder(_OneRun(running))
        every = min(STALL_POLL[1], max(STALL_POLL[0], after / 4))
        while not done.wait(every):
            snap = builder.build()
            watch.update(snap.phases, now=snap.t)
    except Exception as e:  # noqa: BLE001 - the watch is advisory; the run goes on without it
        log(redactor.text(f"stall watch ended: {type(e).__name__}: {e}"))


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
    redactor = _redactor(argv)
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


def _child_env(rd: RunDir, additions: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in additions.items()})
    env[EVENTS_ENV] = str(rd.events_jsonl)
    env[RUN_DIR_ENV] = str(rd.path)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Launcher:
    def __init__(self, rd: RunDir) -> None:
        self.rd = rd
        self.child: subprocess.Popen[bytes] | None = None
        self.stop_requested = False

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            try:
                os.killpg(child.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def stopping(self) -> bool:
        return self.stop_requested or self.rd.stopping_file.exists()

    def run(self) -> int:
        """Handlers (not SIG_IGN) so that the phase, after exec, gets default dispositions."""
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, lambda s, f: None)
        try:
            return self._run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _run(self) -> int:
        rd = self.rd
        me = os.getpid()
        mine = procs.start_time(me)
        started = time.time()
        rd.write_pid(PidInfo(pid=me, start_time=mine, started_at=started))
        argv = rd.read_argv()
        if argv is None:
            raise RuntimeError(f"{rd.argv_json} is missing or not valid JSON: nothing to run")
        phase_id = argv.get("phase", rd.phase_id)

        code: int | None
        sig: int | None = None
        error = None
        if self.stopping():
            log(f"phase {phase_id} was stopped before it started")
            code = None
        else:
            code, sig, error = self._run_child(argv, mine, started)
        ended = time.time()
        stopped = self.stopping()
        exit_info = ExitInfo(code=code, signal=sig, ended_at=ended, stopped=stopped, error=error)
        rd.write_exit(exit_info)
        how = f"code {code}" if code is not None else (f"signal {sig}" if sig else "no code")
        log(f"phase {phase_id} ended ({how}) after {ended - started:.1f}s" + (", stopped" if stopped else ""))

        outcome = "none"
        if code == 0 and not stopped:
            outcome = finish(rd, argv, self.stopping)
            if self.stopping():
                stopped = True
                rd.write_exit(ExitInfo(code=code, signal=sig, ended_at=ended, stopped=True))
        _journal(rd, "run_ended", _redactor(argv), phase=phase_id, run_id=rd.run_id, code=code, signal=sig,
                 stopped=stopped, duration_s=round(ended - started, 3), verify=outcome,
                 **({"error": error} if error else {}))
        notify_end(rd, argv)
        return 0

    def _run_child(self, argv: dict[str, Any], mine: float | None,
                   started: float) -> tuple[int | None, int | None, str | None]:
        rd = self.rd
        shown = [str(a) for a in argv["argv"]]
        log(f"run {rd.run_id} of phase {argv.get('phase')}: {subprocess.list2cmdline(shown)} (in {argv.get('cwd')})")
        real = _redactor(argv).restore(argv)
        cmd = [str(a) for a in real["argv"]]
        log_fd = os.open(rd.output_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            self.child = subprocess.Popen(
                cmd, cwd=real.get("cwd") or None, env=_child_env(rd, real.get("env") or {}),
                stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                process_group=0, close_fds=True,
            )
        except OSError as e:
            msg = _redactor(argv).text(f"cannot start phase {argv.get('phase')}: {e}")
            log(msg)
            return (126 if isinstance(e, PermissionError) else 127), None, msg
        finally:
            os.close(log_fd)
        child = self.child
        try:
            rd.write_pid(PidInfo(pid=os.getpid(), start_time=mine, child_pid=child.pid,
                                 child_start_time=procs.start_time(child.pid), started_at=started))
        except OSError as e:
            log(f"could not record the phase pid {child.pid} in {rd.pid_file}: {e}")
        if self.stop_requested:
            self._forward(signal.SIGTERM)
        watching = threading.Event()
        try:
            watch: threading.Thread | None = threading.Thread(
                target=watch_stalls, args=(rd, argv, started, watching), name="stall-watch", daemon=True)
            watch.start()
        except RuntimeError as e:  # no thread to be had: the run goes on unwatched
            log(f"stall watch not started: {e}")
            watch = None
        try:
            rc = child.wait()
        finally:
            watching.set()
            if watch is not None:
                watch.join(STALL_JOIN_S)
        return (rc, None, None) if rc >= 0 else (None, -rc, None)


def main(args: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m console.launcher")
    p.add_argument("run_dir")
    p.add_argument("--lock-fd", type=int, default=None,
                   help="the phase lock descriptor to hold until the run has ended")
    ns = p.parse_args(args)
    if ns.lock_fd is not None:
        try:
            os.set_inheritable(ns.lock_fd, False)
        except OSError as e:
            log(f"the phase lock descriptor {ns.lock_fd} is not open ({e}); running unlocked")
    rd = RunDir(os.path.abspath(ns.run_dir))
    launcher = Launcher(rd)
    try:
        return launcher.run()
    except BaseException as e:  # noqa: BLE001 - the last word of a detached process goes to its log
        log(f"launcher error: {type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stderr)
        if rd.read_exit() is None and (launcher.child is None or launcher.child.poll() is not None):
            try:
                rd.write_exit(ExitInfo(code=None, signal=None, ended_at=time.time(),
                                       stopped=launcher.stopping(), error=f"launcher error: {e}"))
            except OSError as e2:
                log(f"could not write {rd.exit_file}: {e2}")
        argv = rd.read_argv()
        if argv is not None and rd.read_exit() is not None:
            notify_end(rd, argv)
        return 1


if __name__ == "__main__":
    sys.exit(main())
