"""The process that owns one run: `python -m console.launcher RUN_DIR [--lock-fd N]`.

It lives in its own session, started by `manager.start_run`, so that a phase outlives the
console or CLI that started it (and the SSH session around them). It holds the phase lock
it inherited, writes `pid` before the phase starts, runs the phase with its output in
`output.log`, writes `exit` atomically, and leaves the rest to `supervision`: the stall watch
while the phase runs, then verification, provenance, the journal's end and the notifications.
It imports only what starting the phase needs; supervision loads once the phase has started.

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
from types import FrameType, ModuleType
from typing import Any

from console.core.runs import procs
from console.core.runs.launcher_output import journal, log, redactor_of
from console.core.runs.rundir import RUN_DIR_ENV, STOPPING, ExitInfo, PidInfo, RunDir
from pipeline.events import ENV_VAR as EVENTS_ENV


def supervision() -> ModuleType:
    """The launcher's duties beyond running the phase, loaded on first use: after the phase has
    started, or when it could not be (the declared import in tests/test_layers.py)."""
    from console import supervision as duties

    return duties


STALL_JOIN_S = 2.0  # how long the end of a run waits for the stall watch's last look


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
        self.deadline: float | None = None  # the project deadline that stopped the phase

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            procs.signal_group(child.pid, signum)

    def stopping(self) -> bool:
        return self.stop_requested or self.rd.stopping_file.exists()

    def stop_at_deadline(self, deadline: Any) -> None:
        """The deadline's stop, the one `eagle3 stop` and the console's `s` send: SIGTERM to
        the phase's group and its strays, SIGKILL after the grace, journaled with the deadline.
        Our child is left unreaped: the main thread's wait records how it ended."""
        child, rd = self.child, self.rd
        if child is None or child.returncode is not None or self.stopping():
            return  # ended, or an operator's stop came first
        argv = rd.read_argv() or {}
        self.deadline = deadline.at
        rd.mark(STOPPING, deadline=deadline.at)
        self.stop_requested = True
        log(f"the deadline ({deadline.clock()}) has come: stopping the phase "
            f"(SIGTERM, SIGKILL after {deadline.grace:g}s)")
        journal(rd, "stop", redactor_of(argv), phase=argv.get("phase", rd.phase_id), run_id=rd.run_id,
                pid=child.pid, grace=deadline.grace, deadline=deadline.at,
                reason=f"stopped at the deadline ({deadline.clock()})")
        me = os.getpid()
        procs.kill_group(child.pid, deadline.grace, sid=me, spare={me},
                         extra=procs.with_env(RUN_DIR_ENV, str(rd.path)), reap=False)

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
        if stopped and self.deadline is None:  # a walk's stop for the deadline, sent from outside
            marked = (rd.read_stopping() or {}).get("deadline")
            self.deadline = float(marked) if isinstance(marked, (int, float)) else None
        exit_info = ExitInfo(code=code, signal=sig, ended_at=ended, stopped=stopped, error=error,
                             deadline=self.deadline)
        rd.write_exit(exit_info)
        how = f"code {code}" if code is not None else (f"signal {sig}" if sig else "no code")
        said = ", stopped at the deadline" if self.deadline is not None else ", stopped"
        log(f"phase {phase_id} ended ({how}) after {ended - started:.1f}s" + (said if stopped else ""))

        outcome = "none"
        if code == 0 and not stopped:
            outcome = supervision().finish(rd, argv, self.stopping)
            if self.stopping():
                stopped = True
                rd.write_exit(ExitInfo(code=code, signal=sig, ended_at=ended, stopped=True))
        journal(rd, "run_ended", redactor_of(argv), phase=phase_id, run_id=rd.run_id, code=code, signal=sig,
                 stopped=stopped, duration_s=round(ended - started, 3), verify=outcome,
                 **({"error": error} if error else {}),
                 **({"deadline": self.deadline} if self.deadline is not None else {}))
        supervision().notify_end(rd, argv)
        return 0

    def _run_child(self, argv: dict[str, Any], mine: float | None,
                   started: float) -> tuple[int | None, int | None, str | None]:
        rd = self.rd
        shown = [str(a) for a in argv["argv"]]
        log(f"run {rd.run_id} of phase {argv.get('phase')}: {subprocess.list2cmdline(shown)} (in {argv.get('cwd')})")
        real = redactor_of(argv).restore(argv)
        cmd = [str(a) for a in real["argv"]]
        log_fd = os.open(rd.output_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            self.child = subprocess.Popen(
                cmd, cwd=real.get("cwd") or None, env=_child_env(rd, real.get("env") or {}),
                stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                process_group=0, close_fds=True,
            )
        except OSError as e:
            msg = redactor_of(argv).text(f"cannot start phase {argv.get('phase')}: {e}")
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
        watch = self._watch("stall-watch", "watch_stalls", (rd, argv, started, watching))
        self._watch("deadline-watch", "watch_deadline", (rd, started, watching, self.stop_at_deadline))
        try:
            rc = child.wait()
        finally:
            watching.set()
            if watch is not None:
                watch.join(STALL_JOIN_S)
        return (rc, None, None) if rc >= 0 else (None, -rc, None)

    @staticmethod
    def _watch(name: str, duty: str, args: tuple[Any, ...]) -> threading.Thread | None:
        """A thread that looks at the run while it runs (supervision's `duty`); the run goes on
        without it when none can be had (no thread, or no supervision to load)."""
        try:
            thread = threading.Thread(target=getattr(supervision(), duty), args=args, name=name, daemon=True)
            thread.start()
        except Exception as e:  # noqa: BLE001 - no thread to be had: the run goes on unwatched
            log(f"{name.replace('-', ' ')} not started: {type(e).__name__}: {e}")
            return None
        return thread


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
            try:
                supervision().notify_end(rd, argv)
            except Exception as e3:  # noqa: BLE001 - supervision itself would not load
                log(f"notifications not sent: {type(e3).__name__}: {e3}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
