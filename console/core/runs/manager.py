"""Start, stop, find and describe runs: what the Project facade, the CLI and the UI call.

Nothing here keeps state in memory. A run is its directory; the state of a run is read
from its files and from whether its recorded processes are still the same processes, so a
console started a day later, or a second console, sees exactly what the first one saw.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import console
from console.core.checks.context import CheckContext
from console.core.checks.registry import run_checks
from console.core.checks.result import CheckResult
from console.core.files.interpreter import python_argv
from console.core.model.config import Config, Phase
from console.core.records.journal import Journal, private_dir, user_name
from console.core.runs import procs
from console.core.runs.locks import PhaseLock
from console.core.runs.rundir import RUN_DIR_ENV, STOPPING, ExitInfo, RunDir, atomic_write_json, new_run_id
from console.core.text.durations import Elapsed
from console.core.text.errors import PhaseError
from console.core.text.redaction import redactor_for

RunState = Literal["running", "verifying", "succeeded", "failed", "stopped", "lost"]

# Where `python -m console...` finds the package, whatever the caller's working directory.
_PACKAGE_ROOT = Path(console.__file__).resolve().parent.parent
# The program that owns a run, above the core: started by its name, never imported from here.
LAUNCHER = "console.launcher"
# How long a run may go without a pid file before it counts as lost (a slow launcher start).
_PID_PATIENCE = 30.0
# How long start_run waits for a run that has ended to release its lock.
_FINISH_PATIENCE = 5.0


@dataclass
class RunStatus(Elapsed):
    state: RunState
    run_id: str
    phase_id: str
    pid: int | None  # the phase process when known, else the launcher
    exit_code: int | None
    started_at: float | None
    ended_at: float | None
    verify: list[CheckResult] | None
    signal: int | None = None
    launcher_pid: int | None = None
    error: str | None = None
    reasons: list[str] = field(default_factory=list)
    deadline: float | None = None  # stopped at the project's deadline, set for this time


def _runs_root(state_dir: str | os.PathLike[str], phase_id: str) -> Path:
    return Path(state_dir) / "runs" / phase_id


def list_runs(state_dir: str | os.PathLike[str], phase_id: str) -> list[RunDir]:
    """Every run of a phase, oldest first. Ids sort by their UTC second; runs that share a
    second are ordered by the creation time in their argv.json."""
    root = _runs_root(state_dir, phase_id)
    try:
        names = [e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")]
    except FileNotFoundError:
        return []
    runs = [RunDir(root / n) for n in sorted(names)]

    def created(rd: RunDir) -> float:
        a = rd.read_argv() or {}
        v = a.get("created_at")
        return float(v) if isinstance(v, (int, float)) else 0.0

    seconds = [rd.run_id[:15] for rd in runs]
    if len(set(seconds)) == len(seconds):
        return runs
    return sorted(runs, key=lambda rd: (rd.run_id[:15], created(rd), rd.run_id))


def latest_run(state_dir: str | os.PathLike[str], phase_id: str) -> RunDir | None:
    runs = list_runs(state_dir, phase_id)
    return runs[-1] if runs else None


def run_status(rd: RunDir) -> RunStatus:
    argv = rd.read_argv() or {}
    pid = rd.read_pid()
    ex = rd.read_exit()
    created = argv.get("created_at") if isinstance(argv.get("created_at"), (int, float)) else None
    started = (pid.started_at if pid and pid.started_at else None) or created
    has_verify = bool(argv.get("verify"))
    verify = rd.read_verify()
    launcher_alive = bool(pid and procs.alive(pid.pid, pid.start_time))
    child_alive = bool(pid and pid.child_pid and procs.alive(pid.child_pid, pid.child_start_time))
    st = RunStatus(state="lost", run_id=rd.run_id, phase_id=rd.phase_id,
                   pid=(pid.child_pid or pid.pid) if pid else None,
                   exit_code=ex.code if ex else None, started_at=started,
                   ended_at=ex.ended_at if ex else None, verify=verify,
                   signal=ex.signal if ex else None, launcher_pid=pid.pid if pid else None,
                   error=ex.error if ex else None, deadline=ex.deadline if ex else None)

    if ex is None:
        if launcher_alive or child_alive:
            st.state = "running"
            if not launcher_alive:
                assert pid is not None  # its child is alive: the pid file was read
                st.reasons.append(f"its launcher (pid {pid.pid}) is gone; the end will not be recorded")
        elif pid is None and created is not None and time.time() - created < _PID_PATIENCE:
            st.state = "running"
            st.reasons.append("starting")
        else:
            st.state = "lost"
            st.reasons.append("no exit was recorded and its processes are gone")
        return st
    if ex.stopped:
        st.state = "stopped"
    elif ex.code != 0:
        st.state = "failed"
    elif launcher_alive:
        # Verifying, then recording provenance: not done until a later phase can rely on it.
        st.state = "verifying"
    elif not has_verify:
        st.state = "succeeded"
    elif verify is None:
        st.state = "lost"
        st.reasons.append("the launcher ended before verification finished")
    else:
        st.state = "failed" if any(r.blocking for r in verify) else "succeeded"
    return st


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """The spawner is the launcher's parent until the spawner exits: collect its status
    so a long-lived console does not accumulate zombies."""
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()


def _orphan_check(state_dir: Path, phase_id: str) -> None:
    rd = latest_run(state_dir, phase_id)
    if rd is None or rd.read_exit() is not None:
        return
    pid = rd.read_pid()
    if pid and pid.child_pid and procs.alive(pid.child_pid, pid.child_start_time):
        raise PhaseError(f"phase {phase_id} still has a process from run {rd.run_id} (pid {pid.child_pid}) "
                         "whose launcher died; stop it first")


def _tail(path: Path, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - n))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _running_message(state_dir: Path, phase_id: str, lock: PhaseLock) -> str:
    rd = latest_run(state_dir, phase_id)
    pid = rd.read_pid() if rd else None
    if pid is not None and rd is not None and rd.read_exit() is None:
        since = pid.started_at or (rd.read_argv() or {}).get("created_at")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
        return (f"phase {phase_id} is already running (pid {pid.child_pid or pid.pid}, since {when}); "
                "stop it first or wait")
    return f"phase {phase_id} is already running ({lock.holder_text()}); stop it first or wait"


def _acquire(state_dir: Path, phase_id: str) -> PhaseLock:
    """Take the phase lock; a run whose phase has ended but whose launcher is still
    journaling holds it for a moment more, so wait that out rather than refuse."""
    lock = PhaseLock(state_dir, phase_id)
    deadline = time.monotonic() + _FINISH_PATIENCE
    while True:
        try:
            return lock.acquire()
        except OSError as e:
            raise PhaseError(f"cannot take the lock {lock.path} for phase {phase_id}: {e}") from None
        except PhaseError:
            rd = latest_run(state_dir, phase_id)
            finishing = rd is not None and rd.read_exit() is not None
            if not finishing or time.monotonic() >= deadline:
                raise PhaseError(_running_message(state_dir, phase_id, lock)) from None
            time.sleep(0.05)


def _prepare(config: Config, ph: Phase, run_env: dict[str, str] | None, state_dir: Path,
             journal: Journal) -> RunDir:
    """Create the run directory with its argv.json and journal the start."""
    root = _runs_root(state_dir, ph.id)
    root.mkdir(parents=True, exist_ok=True)
    while True:
        rd = RunDir(root / new_run_id())
        try:
            rd.path.mkdir()
            break
        except FileExistsError:
            continue
    argv = python_argv(ph.argv, config.python_for(ph))
    env = {**ph.env, **(run_env or {})}
    redactor = redactor_for(config)
    record = {
        "phase": ph.id, "run_id": rd.run_id, "argv": argv, "env": env,
        "cwd": str(config.root), "config_path": str(config.path),
        "config_fingerprint": config.fingerprint, "overrides": dict(config.overrides),
        "created_at": time.time(), "kind": ph.kind,
        "verify": [s.to_json() for s in ph.verify],
        "inputs": [str(config.resolve(p)) for p in ph.inputs],
        "outputs": [str(config.resolve(p)) for p in ph.outputs],
        "user": user_name(), "state_dir": str(state_dir),
    }
    # ${env:...} values never reach the disk; the launcher restores them from its
    # inherited environment, by these names, when it execs the phase.
    record = redactor.obj(record)
    record["secret_env"] = list(redactor.names)
    atomic_write_json(rd.argv_json, record)
    os.close(os.open(rd.events_jsonl, os.O_WRONLY | os.O_CREAT, 0o600))
    journal.append("run_started", phase=ph.id, run_id=rd.run_id, argv=argv, env=env,
                   config_fingerprint=config.fingerprint, overrides=dict(config.overrides))
    return rd


def start_run(config: Config, phase: Phase | str, run_env: dict[str, str] | None = None,
              journal: Journal | None = None, pid_wait: float = 5.0) -> RunDir:
    """Start a phase detached and return its run directory once the launcher has written
    its pid (or `pid_wait` seconds passed). Raises PhaseError when the phase is already
    running or its launcher could not start."""
    ph = config.phase(phase) if isinstance(phase, str) else phase
    state_dir = private_dir(Path(config.state_dir).absolute())
    journal = journal or Journal(state_dir, redactor_for(config))
    lock = _acquire(state_dir, ph.id)
    try:
        _orphan_check(state_dir, ph.id)
        try:
            rd = _prepare(config, ph, run_env, state_dir, journal)
        except OSError as e:
            raise PhaseError(f"cannot prepare a run of phase {ph.id} in {state_dir}: {e}") from None
        log_fd = os.open(rd.output_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        assert lock.fd is not None  # _acquire() took it
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER, str(rd.path), "--lock-fd", str(lock.fd)],
                cwd=_PACKAGE_ROOT, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(lock.fd,), close_fds=True,
            )
        except OSError as e:
            msg = f"cannot start the launcher for phase {ph.id} ({sys.executable}): {e}"
            rd.write_exit(ExitInfo(code=None, signal=None, ended_at=time.time(), error=msg))
            journal.append("run_ended", phase=ph.id, run_id=rd.run_id, code=None, signal=None,
                           stopped=False, duration_s=0.0, verify="none", error=msg)
            raise PhaseError(msg) from None
        finally:
            os.close(log_fd)
        lock.write_note({"pid": proc.pid, "at": time.time(), "run_id": rd.run_id})
    finally:
        lock.release()
    _reap(proc)

    deadline = time.monotonic() + pid_wait
    while rd.read_pid() is None and time.monotonic() < deadline:
        if proc.poll() is not None and rd.read_pid() is None:
            msg = (f"the launcher for phase {ph.id} exited with code {proc.returncode} before starting it: "
                   f"{_tail(rd.output_log) or 'no output'} (see {rd.output_log})")
            if rd.read_exit() is None:
                rd.write_exit(ExitInfo(code=None, signal=None, ended_at=time.time(), error=msg))
                journal.append("run_ended", phase=ph.id, run_id=rd.run_id, code=None, signal=None,
                               stopped=False, duration_s=0.0, verify="none", error=msg)
            raise PhaseError(msg)
        time.sleep(0.02)
    return rd


def stop_run(config: Config, phase_id: str, grace: float = procs.STOP_GRACE, journal: Journal | None = None,
             run_id: str | None = None, deadline: float | None = None) -> bool:
    """Stop the phase's current run and everything it spawned: SIGTERM, SIGKILL after
    `grace`. Returns False when nothing of it runs. The launcher records the end (as
    stopped); when the launcher itself is gone, the end is recorded here. With `run_id`,
    only that run is stopped: an operator who confirmed a stop of one run never stops the
    run that replaced it meanwhile (PhaseError). `deadline`: the stop is that deadline's
    (a walk's, for a run whose launcher did not stop it), and the run's end says so."""
    state_dir = Path(config.state_dir).absolute()
    rd = latest_run(state_dir, phase_id)
    if rd is None:
        return False
    if run_id is not None and rd.run_id != run_id:
        raise PhaseError(f"{phase_id}: run {run_id} is no longer the phase's run (now {rd.run_id}); "
                         "nothing was stopped. Stop again to stop the new run")
    if rd.read_pid() is None and run_status(rd).state == "running":
        patience = time.monotonic() + 5.0  # a launcher just spawned: let it write its pid
        while rd.read_pid() is None and time.monotonic() < patience:
            time.sleep(0.02)
    pid = rd.read_pid()
    if pid is None:
        return False
    launcher_alive = procs.alive(pid.pid, pid.start_time)
    child_alive = bool(pid.child_pid and procs.alive(pid.child_pid, pid.child_start_time))
    if not launcher_alive and not child_alive:
        return False

    journal = journal or Journal(state_dir, redactor_for(config))
    at = {} if deadline is None else {"deadline": deadline}
    rd.mark(STOPPING, **at)
    journal.append("stop", phase=phase_id, run_id=rd.run_id, pid=pid.child_pid or pid.pid, grace=grace, **at,
                   **({} if deadline is None else {"reason": "stopped at the deadline"}))
    if launcher_alive and not child_alive:
        # Not started yet, or verifying: the launcher handles SIGTERM itself.
        try:
            os.kill(pid.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    marked = procs.with_env(RUN_DIR_ENV, str(rd.path))
    procs.kill_group(pid.child_pid if child_alive and pid.child_pid else pid.pid, grace,
                     sid=pid.pid if launcher_alive else None, spare={pid.pid}, extra=marked)

    patience = time.monotonic() + max(grace, 5.0)
    while procs.alive(pid.pid, pid.start_time) and time.monotonic() < patience:
        time.sleep(0.05)
    if procs.alive(pid.pid, pid.start_time) and rd.read_exit() is None:
        procs.kill_group(pid.pid, 0.5, sid=pid.pid)
    if rd.read_exit() is None:
        why = "stopped; the launcher was gone, so the phase's exit code is unknown"
        ended = time.time()
        rd.write_exit(ExitInfo(code=None, signal=None, ended_at=ended, stopped=True, error=why, deadline=deadline))
        started = pid.started_at or ended
        journal.append("run_ended", phase=phase_id, run_id=rd.run_id, code=None, signal=None,
                       stopped=True, duration_s=round(ended - started, 3), verify="none", error=why, **at)
    return True


READY_TIMEOUT = 10.0  # seconds a readiness probe may take before it counts as not ready


def probe_ready(config: Config, phase: Phase, ctx=None) -> tuple[bool, list[CheckResult]]:  # type: ignore[no-untyped-def]
    """The one definition of a running service's readiness: its `ready` checks, and no
    blocking failure among them (a failing warning-severity check informs, it does not
    hold the service back). No `ready` checks: ready as soon as it runs."""
    if not phase.ready:
        return True, []
    results = run_ready_checks(config, phase, ctx)
    return not any(r.blocking for r in results), results


def readiness(config: Config, phase: Phase | str) -> tuple[bool, list[CheckResult]]:
    """A service phase is ready while its latest run is running and `probe_ready` says so
    (later phases may need it then). Not running: (False, [])."""
    ph = config.phase(phase) if isinstance(phase, str) else phase
    rd = latest_run(config.state_dir, ph.id)
    if rd is None or run_status(rd).state != "running":
        return False, []
    return probe_ready(config, ph)


def run_ready_checks(config: Config, phase: Phase, ctx=None) -> list[CheckResult]:  # type: ignore[no-untyped-def]
    return run_checks(list(phase.ready), ctx or CheckContext(config, phase), timeout=READY_TIMEOUT)


__all__ = ["RunState", "RunStatus", "latest_run", "list_runs", "probe_ready", "readiness", "run_status",
           "start_run", "stop_run"]
