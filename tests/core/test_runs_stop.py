"""Stop ends a run and every process it spawned, and the end is recorded as a stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
from core_harness import config_for, wait_for

from console.core.model.config import Config, Phase
from console.core.records.journal import Journal
from console.core.runs import procs
from console.core.runs.manager import run_status, start_run, stop_run

# A grandchild that ignores SIGTERM, writes its pid to argv[1] and sleeps; with "setsid"
# it first moves to a session of its own, with "daemon" it also double-forks so its
# parent exits and it is no longer anyone's descendant.
STUBBORN = textwrap.dedent("""
    import os, signal, sys, time
    mode = sys.argv[2]
    if mode in ("setsid", "daemon"):
        os.setsid()
    if mode == "daemon" and os.fork():
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        time.sleep(0.1)  # wait-ok: poll interval
""")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def test_stop_leaves_no_grandchild_even_ones_that_ignore_sigterm(tmp_path):
    stub = tmp_path / "stubborn.py"
    stub.write_text(STUBBORN)
    script = (f'"{sys.executable}" stubborn.py same.pid same & '
              f'"{sys.executable}" stubborn.py setsid.pid setsid & '
              f'"{sys.executable}" stubborn.py daemon.pid daemon & '
              'trap "" TERM; echo $$ > shell.pid; wait; wait; wait; sleep 60')
    ph = Phase(id="extract", title="Extract", argv=("sh", "-c", script))
    cfg = config_for(tmp_path, ph)
    rd = start_run(cfg, ph)
    try:
        _stop_and_check(cfg, rd, tmp_path)
    finally:  # whatever failed above, leave no stray process on the test machine
        for n in ("shell", "same", "setsid", "daemon"):
            pid = read_pid(tmp_path / f"{n}.pid")
            if pid and not procs.gone(pid):
                os.kill(pid, signal.SIGKILL)


def _stop_and_check(cfg: Config, rd, tmp_path: Path) -> None:
    names = ["shell", "same", "setsid", "daemon"]
    pids = {n: wait_for(lambda n=n: read_pid(tmp_path / f"{n}.pid"), what=f"{n} pid") for n in names}
    for n, pid in pids.items():
        assert not procs.gone(pid), n
    assert os.getsid(pids["setsid"]) != os.getsid(pids["shell"])

    t0 = time.monotonic()
    assert stop_run(cfg, "extract", grace=1.0) is True
    wait_for(lambda: all(procs.gone(p) for p in pids.values()), timeout=10,
             what="every process of the run to be gone")
    assert time.monotonic() - t0 < 15  # bounded, not a timing claim: SIGKILL came after the grace

    st = run_status(rd)
    assert st.state == "stopped"
    assert rd.read_exit().stopped is True
    recs = Journal(cfg.state_dir).read(phase="extract")
    assert [r["event"] for r in recs] == ["run_started", "stop", "run_ended"]
    assert recs[-1]["stopped"] is True and recs[-1]["verify"] == "none"
    assert stop_run(cfg, "extract", grace=1.0) is False  # nothing runs any more


def test_stop_a_polite_phase_lets_it_exit_on_sigterm(tmp_path):
    ph = Phase(id="train", title="Train", argv=("python", "-c", textwrap.dedent("""
        import signal, sys, time
        def bye(*a):
            print("saving checkpoint", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        time.sleep(60)  # wait-ok: the phase program's own work, not a test pause
    """)))
    cfg = config_for(tmp_path, ph)
    rd = start_run(cfg, ph)
    wait_for(lambda: "ready" in rd.output_log.read_text().splitlines(), what="phase ready")
    assert stop_run(cfg, "train", grace=5.0)
    st = run_status(rd)
    assert (st.state, st.exit_code) == ("stopped", 0)
    assert "saving checkpoint" in rd.output_log.read_text()
    assert rd.read_verify() is None  # a stopped run is not verified


def test_stop_with_nothing_running_is_false(tmp_path):
    ph = Phase(id="merge", title="Merge", argv=("true",))
    cfg = config_for(tmp_path, ph)
    assert stop_run(cfg, "merge") is False
    rd = start_run(cfg, ph)
    wait_for(lambda: run_status(rd).state == "succeeded", what="run to succeed")
    assert stop_run(cfg, "merge") is False
    assert "stop" not in {r["event"] for r in Journal(cfg.state_dir).read()}


def test_stop_kills_a_phase_whose_launcher_died(tmp_path):
    ph = Phase(id="serve", title="Serve", argv=("sleep", "60"), kind="service")
    cfg = config_for(tmp_path, ph)
    rd = start_run(cfg, ph)
    info = wait_for(lambda: (p := rd.read_pid()) and p.child_pid and p, what="child pid")
    os.kill(info.pid, signal.SIGKILL)  # the launcher is gone (OOM killer, say)
    wait_for(lambda: not procs.alive(info.pid, info.start_time), what="launcher death")

    st = run_status(rd)
    assert st.state == "running" and st.pid == info.child_pid
    assert "launcher" in st.reasons[0]
    assert stop_run(cfg, "serve", grace=1.0) is True
    wait_for(lambda: procs.gone(info.child_pid), what="phase process gone")
    st = run_status(rd)
    assert st.state == "stopped" and st.exit_code is None
    assert Journal(cfg.state_dir).read(events={"run_ended"})[-1]["stopped"] is True


def test_kill_group_spares_the_named_pid(tmp_path):
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], process_group=0)
    spared = subprocess.Popen(["sleep", "60"], process_group=leader.pid)
    try:
        wait_for(lambda: len(psutil.Process(leader.pid).children()) == 2, what="two sleeps")
        kids = [c.pid for c in psutil.Process(leader.pid).children()]
        procs.kill_group(leader.pid, grace=1.0, spare={spared.pid})
        assert leader.poll() is not None
        wait_for(lambda: all(procs.gone(k) for k in kids), what="children gone")
        assert spared.poll() is None
    finally:
        spared.kill()
        spared.wait()
        leader.wait()


def test_a_stop_confirmed_for_one_run_never_stops_the_run_that_replaced_it(tmp_path):
    import pytest

    from console.core.text.errors import PhaseError

    ph = Phase(id="train", title="Train", argv=("sh", "-c", "echo ready; exec sleep 60"))
    cfg = config_for(tmp_path, ph)
    first = start_run(cfg, ph)
    wait_for(lambda: "ready" in first.output_log.read_text().splitlines(), what="first run ready")
    assert stop_run(cfg, "train", grace=1.0, run_id=first.run_id)
    wait_for(lambda: run_status(first).state == "stopped", what="first run stopped")
    second = start_run(cfg, ph)
    wait_for(lambda: "ready" in second.output_log.read_text().splitlines(), what="second run ready")
    try:
        with pytest.raises(PhaseError, match=f"run {first.run_id} is no longer"):
            stop_run(cfg, "train", grace=1.0, run_id=first.run_id)
        assert run_status(second).state == "running"
    finally:
        assert stop_run(cfg, "train", grace=1.0, run_id=second.run_id)


def test_needs_done_cannot_be_overridden_while_the_upstream_phase_still_runs(tmp_path):
    import pytest

    from console.core.lifecycle.project import Blocked, Project

    up = Phase(id="extract", title="Extract", argv=("sh", "-c", "echo writing; exec sleep 60"))
    down = Phase(id="train", title="Train", argv=("true",), needs=("extract",))
    project = Project(config_for(tmp_path, up, down))
    rd = project.start("extract")
    try:
        wait_for(lambda: "writing" in rd.output_log.read_text(), what="upstream running")
        with pytest.raises(Blocked) as blocked:
            project.start("train", overrides={"needs-done": "I know what I am doing"})
        needs = next(r for r in blocked.value.results if r.name == "needs-done")
        assert not needs.overridden and "not overridable while extract runs" in needs.message
    finally:
        project.stop("extract", grace=1.0)
