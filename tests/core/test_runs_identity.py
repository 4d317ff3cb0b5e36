"""A run is identified by (pid, start time): a recycled pid never passes for a phase."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from console.core.runs import procs
from console.core.runs.manager import run_status
from console.core.runs.rundir import ExitInfo, PidInfo, RunDir, atomic_write_json


def fake_run(tmp_path: Path, verify: list | None = None) -> RunDir:
    rd = RunDir(tmp_path / "state" / "runs" / "train" / "20261130-012233-4f2a")
    rd.path.mkdir(parents=True)
    atomic_write_json(rd.argv_json, {"phase": "train", "run_id": rd.run_id, "argv": ["x"],
                                     "created_at": time.time() - 3600, "verify": verify or []})
    return rd


def test_start_time_tells_processes_apart():
    me = procs.start_time(os.getpid())
    assert me is not None and me == procs.start_time(os.getpid())
    p = subprocess.Popen(["sleep", "30"])
    try:
        theirs = procs.start_time(p.pid)
        assert theirs is not None and theirs >= me
        assert procs.alive(p.pid, theirs)
        assert not procs.alive(p.pid, theirs + 1)
    finally:
        p.kill()
        p.wait()
    assert not procs.alive(p.pid, theirs)
    assert procs.start_time(p.pid) is None


def test_a_zombie_is_not_alive():
    p = subprocess.Popen(["true"])
    st = procs.start_time(p.pid)
    deadline = time.monotonic() + 5
    while not procs.gone(p.pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # wait-ok: poll interval
    assert procs.gone(p.pid)  # exited, not yet reaped: a zombie
    assert not procs.alive(p.pid, st)
    p.wait()


def test_reused_pid_is_lost_not_running(tmp_path):
    rd = fake_run(tmp_path)
    me = os.getpid()  # a live process, but not the one that wrote the pid file
    wrong = procs.start_time(me) - 1
    rd.write_pid(PidInfo(pid=me, start_time=wrong, child_pid=me, child_start_time=wrong))
    st = run_status(rd)
    assert st.state == "lost"
    assert st.exit_code is None

    # Control: the same file with the true start time reads as running.
    rd.write_pid(PidInfo(pid=me, start_time=procs.start_time(me)))
    assert run_status(rd).state == "running"


def test_a_run_without_pid_is_running_only_while_young(tmp_path):
    rd = fake_run(tmp_path)
    assert run_status(rd).state == "lost"  # created an hour ago, launcher never wrote its pid
    atomic_write_json(rd.argv_json, {**rd.read_argv(), "created_at": time.time()})
    assert run_status(rd).state == "running"


def test_states_from_exit_and_verify(tmp_path):
    rd = fake_run(tmp_path, verify=[{"kind": "exists", "arg": "x", "name": "out", "severity": "error"}])
    dead = PidInfo(pid=os.getpid(), start_time=-1.0, started_at=time.time() - 10)
    rd.write_pid(dead)
    rd.write_exit(ExitInfo(code=0, signal=None, ended_at=time.time()))
    st = run_status(rd)
    assert st.state == "lost" and "verification" in st.reasons[0]

    # While the launcher lives, exit 0 means "verifying" until verify.json is written.
    rd.write_pid(PidInfo(pid=os.getpid(), start_time=procs.start_time(os.getpid())))
    assert run_status(rd).state == "verifying"

    from console.core.checks.result import CheckResult
    rd.write_pid(dead)
    rd.write_verify([CheckResult("out", "exists", "error", "fail", "x does not exist")])
    st = run_status(rd)
    assert st.state == "failed" and st.exit_code == 0 and st.verify[0].message == "x does not exist"
    rd.write_verify([CheckResult("out", "exists", "error", "pass", "x exists")])
    st = run_status(rd)
    assert st.state == "succeeded"
    assert 9.0 < st.duration_s < 60

    rd.write_exit(ExitInfo(code=None, signal=9, ended_at=time.time(), stopped=True))
    assert run_status(rd).state == "stopped"
