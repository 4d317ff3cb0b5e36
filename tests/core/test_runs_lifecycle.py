"""A phase runs detached: it outlives whoever started it and records its own end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from core_harness import config_for, wait_for

from console.core.model.config import Config, Phase
from console.core.records.journal import Journal
from console.core.runs import procs
from console.core.runs.manager import latest_run, list_runs, run_status, start_run, stop_run
from console.core.runs.rundir import RunDir
from console.core.text.errors import PhaseError

REPO = Path(__file__).resolve().parents[2]


def make_config(tmp_path: Path, *phases: Phase) -> Config:
    """The values argv.json must carry through: a fingerprint and a --set override."""
    return config_for(tmp_path, *phases, fingerprint="fp-1", overrides={"workdir": "/x"})


def py(code: str) -> tuple[str, ...]:
    return ("python", "-c", textwrap.dedent(code))


def wait_ended(rd: RunDir, timeout: float = 10.0):
    """Until the launcher has finished everything (verify, provenance, journal)."""
    def ended():
        pid = rd.read_pid()
        return rd.read_exit() is not None and pid is not None and not procs.alive(pid.pid, pid.start_time)
    wait_for(ended, timeout, f"{rd} to end")
    return run_status(rd)


def test_phase_runs_detached_and_records_output_exit_and_journal(tmp_path):
    ph = Phase(id="merge", title="Merge", argv=py("""
        import os, sys
        from pipeline.events import EventWriter
        print("merging", os.environ["SHARD"], os.getcwd())
        print("to stderr", file=sys.stderr)
        EventWriter.from_env().progress(3, 10)
        assert os.getsid(0) != int(os.environ["STARTER_SID"])
    """), env={"SHARD": "7"})
    cfg = make_config(tmp_path, ph)
    rd = start_run(cfg, ph, run_env={"STARTER_SID": str(os.getsid(0)), "PYTHONPATH": str(REPO)})

    assert rd.path.parent == tmp_path / "state" / "runs" / "merge"
    assert rd.read_pid() is not None  # written before start_run returns
    st = wait_ended(rd)
    assert st.state == "succeeded"
    assert st.exit_code == 0 and st.duration_s is not None

    log = rd.output_log.read_text()
    assert f"merging 7 {tmp_path}" in log
    assert "to stderr" in log
    assert json.loads(rd.events_jsonl.read_text())["done"] == 3

    argv = rd.read_argv()
    assert argv["phase"] == "merge" and argv["run_id"] == rd.run_id
    assert argv["argv"][0] == sys.executable
    assert argv["env"] == {"SHARD": "7", "STARTER_SID": str(os.getsid(0)), "PYTHONPATH": str(REPO)}
    assert argv["cwd"] == str(tmp_path) and argv["config_fingerprint"] == "fp-1"
    assert argv["overrides"] == {"workdir": "/x"}

    events = [(r["event"], r["run_id"]) for r in Journal(cfg.state_dir).read(phase="merge")]
    assert events == [("run_started", rd.run_id), ("run_ended", rd.run_id)]
    ended = Journal(cfg.state_dir).read(events={"run_ended"})[0]
    assert ended["code"] == 0 and ended["stopped"] is False and ended["verify"] == "none"
    assert ended["duration_s"] >= 0


def test_nonzero_exit_is_failed_with_its_code(tmp_path):
    ph = Phase(id="train", title="Train", argv=("sh", "-c", "echo boom; exit 3"))
    rd = start_run(make_config(tmp_path, ph), ph)
    st = wait_ended(rd)
    assert (st.state, st.exit_code) == ("failed", 3)
    assert "boom" in rd.output_log.read_text()
    assert Journal(tmp_path / "state").read(events={"run_ended"})[-1]["code"] == 3


def test_missing_program_fails_with_a_message_in_the_log(tmp_path):
    ph = Phase(id="x", title="X", argv=("no-such-program-eagle3",))
    rd = start_run(make_config(tmp_path, ph), ph)
    st = wait_ended(rd)
    assert (st.state, st.exit_code) == ("failed", 127)
    assert "cannot start phase x" in rd.output_log.read_text()
    assert "no-such-program-eagle3" in st.error


def test_phase_killed_by_a_signal_is_failed(tmp_path):
    ph = Phase(id="x", title="X", argv=py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    st = wait_ended(start_run(make_config(tmp_path, ph), ph))
    assert st.state == "failed"
    assert (st.exit_code, st.signal) == (None, signal.SIGKILL)


STARTER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from console.core.model.config import Config, Phase
from console.core.runs.manager import start_run
tmp = Path({tmp!r})
ph = Phase(id="extract", title="Extract", argv=("sh", "-c", "until [ -e go ]; do sleep 0.05; done; echo finished > done.txt; exit 0"))
cfg = Config(path=tmp / "pipeline.yaml", name="t", vars={{}}, state_dir=tmp / "state", volumes=(),
             phases=(ph,), fingerprint="fp")
rd = start_run(cfg, ph)
print(rd.path, flush=True)
time.sleep(600)  # wait-ok: the phase program's own work, not a test pause
"""


def test_phase_survives_sigkill_of_its_starter_and_finishes(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER.format(repo=str(REPO), tmp=str(tmp_path))],
                               stdout=subprocess.PIPE, text=True)
    try:
        rd = RunDir(starter.stdout.readline().strip())
        assert rd.read_pid() is not None
    finally:
        starter.kill()  # SIGKILL: no cleanup, no atexit
        starter.wait()

    st = run_status(rd)
    assert st.state == "running"
    cfg = make_config(tmp_path, Phase(id="extract", title="Extract", argv=("true",)))
    with pytest.raises(PhaseError, match=r"phase extract is already running \(pid \d+, since "):
        start_run(cfg, "extract")

    assert not (tmp_path / "done.txt").exists()
    (tmp_path / "go").touch()  # the phase finishes only now, long after its starter died
    st = wait_ended(rd, timeout=15)
    assert (st.state, st.exit_code) == ("succeeded", 0)
    assert (tmp_path / "done.txt").read_text() == "finished\n"
    # The lock died with the launcher: the phase can run again.
    rd2 = start_run(cfg, "extract")
    assert wait_ended(rd2).state == "succeeded"
    assert latest_run(cfg.state_dir, "extract") == rd2
    assert list_runs(cfg.state_dir, "extract") == [rd, rd2]


def test_second_concurrent_run_is_refused_and_allowed_after_stop(tmp_path):
    ph = Phase(id="serve", title="Serve", argv=("sleep", "30"), kind="service")
    cfg = make_config(tmp_path, ph)
    rd = start_run(cfg, ph)
    try:
        pid = wait_for(lambda: (rd.read_pid() or None) and rd.read_pid().child_pid, what="child pid")
        with pytest.raises(PhaseError) as err:
            start_run(cfg, ph)
        assert str(err.value).startswith(f"phase serve is already running (pid {pid}, since ")
        assert str(err.value).endswith("stop it first or wait")
        assert list_runs(cfg.state_dir, "serve") == [rd]  # the refused run left nothing behind
    finally:
        assert stop_run(cfg, "serve", grace=2.0)
    assert run_status(rd).state == "stopped"
    rd2 = start_run(cfg, ph)
    assert rd2 != rd and run_status(rd2).state == "running"
    stop_run(cfg, "serve", grace=2.0)


def test_runs_in_the_same_second_sort_by_creation(tmp_path):
    ph = Phase(id="q", title="Q", argv=("true",))
    cfg = make_config(tmp_path, ph)
    runs = []
    for _ in range(4):
        runs.append(start_run(cfg, ph))
        wait_ended(runs[-1])
    assert list_runs(cfg.state_dir, "q") == runs
    assert latest_run(cfg.state_dir, "q") == runs[-1]
    assert latest_run(cfg.state_dir, "nothing") is None


def test_a_launcher_that_cannot_start_is_reported(tmp_path, monkeypatch):
    ph = Phase(id="q", title="Q", argv=("true",))
    cfg = make_config(tmp_path, ph)
    broken = tmp_path / "python"  # an interpreter that dies before the launcher runs
    broken.write_text("#!/bin/sh\necho 'ImportError: cannot import name psutil' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(broken))
    with pytest.raises(PhaseError, match=r"the launcher for phase q exited with code 1 before starting it: "
                                         r"ImportError: cannot import name psutil \(see .*output.log\)"):
        start_run(cfg, ph)
    [failed] = list_runs(cfg.state_dir, "q")
    st = run_status(failed)
    assert st.state == "failed" and "ImportError" in st.error
    assert Journal(cfg.state_dir).read(events={"run_ended"})[-1]["error"] == st.error
    monkeypatch.undo()
    rd = start_run(cfg, ph)  # the failed attempt left no lock behind
    assert wait_ended(rd).state == "succeeded"
