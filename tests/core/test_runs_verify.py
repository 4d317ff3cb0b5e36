"""After exit 0 the launcher verifies, then records provenance only for a verified phase."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from console import launcher, supervision
from console.core.checks.result import CheckResult
from console.core.model.config import CheckSpec
from console.core.records.journal import Journal
from console.core.runs import procs
from console.core.runs.manager import run_status
from console.core.runs.rundir import RunDir, atomic_write_json

SPEC = CheckSpec(kind="exists", arg="out.txt", name="output-written")


def make_run(tmp_path: Path, argv: list[str], verify: list[CheckSpec]) -> RunDir:
    rd = RunDir(tmp_path / "state" / "runs" / "train" / "20261130-012233-4f2a")
    rd.path.mkdir(parents=True)
    atomic_write_json(rd.argv_json, {
        "phase": "train", "run_id": rd.run_id, "argv": argv, "env": {}, "cwd": str(tmp_path),
        "config_path": str(tmp_path / "pipeline.yaml"), "overrides": {"x": "1"},
        "created_at": time.time(), "kind": "task", "verify": [s.to_json() for s in verify],
    })
    return rd


class Fakes:
    """Stand-ins for the config loader, the check registry and provenance."""

    def __init__(self, monkeypatch, status: str = "pass") -> None:
        self.status = status
        self.loaded: list[tuple[str, dict]] = []
        self.checked: list[list[CheckSpec]] = []
        self.recorded: list[str] = []
        self.load_error: Exception | None = None
        self.check_error: Exception | None = None
        self.record_error: Exception | None = None
        monkeypatch.setattr(supervision, "load_phase_config", self.load)
        monkeypatch.setattr(supervision, "run_verify_checks", self.check)
        monkeypatch.setattr(supervision, "record_provenance", self.record)

    def load(self, argv):
        if self.load_error:
            raise self.load_error
        self.loaded.append((argv["config_path"], argv["overrides"]))
        return "CONFIG", "PHASE"

    def check(self, specs, config, phase):
        assert (config, phase) == ("CONFIG", "PHASE")
        if self.check_error:
            raise self.check_error
        self.checked.append(specs)
        return [CheckResult(s.name, s.kind, s.severity, self.status, f"{s.name}: {self.status}") for s in specs]

    def record(self, config, phase, run_id):
        if self.record_error:
            raise self.record_error
        self.recorded.append(run_id)


def test_passing_verify_writes_results_and_records_provenance(tmp_path, monkeypatch):
    fakes = Fakes(monkeypatch)
    rd = make_run(tmp_path, ["true"], [SPEC])
    assert supervision.finish(rd, rd.read_argv()) == "passed"
    assert fakes.loaded == [(str(tmp_path / "pipeline.yaml"), {"x": "1"})]
    assert fakes.checked == [[SPEC]]
    assert [r.status for r in rd.read_verify()] == ["pass"]
    assert rd.verifying_file.exists()
    assert fakes.recorded == [rd.run_id]
    rec = Journal(rd.state_dir).read(events={"verify"})[-1]
    assert rec["passed"] is True and rec["results"][0]["name"] == "output-written"


def test_failing_verify_records_no_provenance(tmp_path, monkeypatch):
    fakes = Fakes(monkeypatch, status="fail")
    rd = make_run(tmp_path, ["true"], [SPEC])
    assert supervision.finish(rd, rd.read_argv()) == "failed"
    assert rd.read_verify()[0].message == "output-written: fail"
    assert fakes.recorded == []


def test_a_warning_does_not_fail_verification(tmp_path, monkeypatch):
    Fakes(monkeypatch, status="warn")
    rd = make_run(tmp_path, ["true"], [SPEC])
    assert supervision.finish(rd, rd.read_argv()) == "passed"


def test_config_that_no_longer_loads_fails_verification_with_its_message(tmp_path, monkeypatch):
    fakes = Fakes(monkeypatch)
    fakes.load_error = ValueError("pipeline.yaml:3: phases: expected a list")
    rd = make_run(tmp_path, ["true"], [SPEC])
    assert supervision.finish(rd, rd.read_argv()) == "failed"
    [r] = rd.read_verify()
    assert r.status == "fail" and "pipeline.yaml:3: phases: expected a list" in r.message
    assert fakes.recorded == []


def test_crashing_checks_fail_verification(tmp_path, monkeypatch):
    fakes = Fakes(monkeypatch)
    fakes.check_error = RuntimeError("registry exploded")
    rd = make_run(tmp_path, ["true"], [SPEC])
    assert supervision.finish(rd, rd.read_argv()) == "failed"
    assert "registry exploded" in rd.read_verify()[0].message


def test_no_verify_checks_still_records_provenance_and_its_failure_is_not_fatal(tmp_path, monkeypatch, capsys):
    fakes = Fakes(monkeypatch)
    rd = make_run(tmp_path, ["true"], [])
    assert supervision.finish(rd, rd.read_argv()) == "none"
    assert rd.read_verify() is None and fakes.recorded == [rd.run_id]
    fakes.record_error = OSError("No space left on device")
    assert supervision.finish(rd, rd.read_argv()) == "none"
    assert "provenance not recorded: OSError: No space left on device" in capsys.readouterr().err


def run_launcher_in_process(rd: RunDir) -> None:
    """The launcher's whole sequence in this process, so the fakes apply; afterwards the
    pid file is pointed at a dead launcher, as it would be once a real one exited."""
    assert launcher.Launcher(rd).run() == 0
    pid = rd.read_pid()
    rd.write_pid(type(pid)(pid=pid.pid, start_time=-1.0, child_pid=pid.child_pid,
                           child_start_time=pid.child_start_time, started_at=pid.started_at))


def test_launcher_verifies_only_after_exit_zero(tmp_path, monkeypatch):
    fakes = Fakes(monkeypatch)
    ok = make_run(tmp_path / "ok", ["sh", "-c", "echo made > out.txt"], [SPEC])
    run_launcher_in_process(ok)
    st = run_status(ok)
    assert (st.state, st.exit_code) == ("succeeded", 0)
    assert fakes.recorded == [ok.run_id]
    assert Journal(ok.state_dir).read(events={"run_ended"})[-1]["verify"] == "passed"

    bad = make_run(tmp_path / "bad", ["sh", "-c", "exit 2"], [SPEC])
    run_launcher_in_process(bad)
    st = run_status(bad)
    assert (st.state, st.exit_code, st.verify) == ("failed", 2, None)
    assert fakes.checked == [[SPEC]]  # only the first run was verified
    assert Journal(bad.state_dir).read(events={"run_ended"})[-1]["verify"] == "none"


def test_launcher_marks_a_verify_failure_failed(tmp_path, monkeypatch):
    Fakes(monkeypatch, status="fail")
    rd = make_run(tmp_path, ["true"], [SPEC])
    run_launcher_in_process(rd)
    st = run_status(rd)
    assert (st.state, st.exit_code) == ("failed", 0)
    assert st.verify[0].status == "fail"
    assert Journal(rd.state_dir).read(events={"run_ended"})[-1]["verify"] == "failed"


def test_launcher_does_not_start_a_phase_stopped_before_it_began(tmp_path, monkeypatch):
    fakes = Fakes(monkeypatch)
    rd = make_run(tmp_path, ["sh", "-c", "echo ran > ran.txt"], [SPEC])
    rd.mark("stopping")
    run_launcher_in_process(rd)
    assert run_status(rd).state == "stopped"
    assert not (tmp_path / "ran.txt").exists() and fakes.checked == []


def test_a_phase_runs_to_its_end_when_the_launchers_supervision_will_not_load(tmp_path, monkeypatch, capsys):
    """Supervision loads after the phase has started (a console upgraded under a starting run, a
    broken install): the phase still runs and its exit is kept; the run is not called verified."""
    def broken():
        raise ImportError("cannot import name 'Notifier' from 'console.core.lifecycle.notify'")

    monkeypatch.setattr(launcher, "supervision", broken)
    rd = make_run(tmp_path, ["sh", "-c", "echo made > out.txt"], [SPEC])
    assert launcher.main([str(rd.path)]) == 1
    said = capsys.readouterr().err
    assert (tmp_path / "out.txt").read_text() == "made\n"
    assert rd.read_exit().code == 0 and rd.read_verify() is None
    assert "stall watch not started: ImportError: cannot import name 'Notifier'" in said
    assert "launcher error: ImportError" in said and "notifications not sent: ImportError" in said
    pid = rd.read_pid()
    rd.write_pid(type(pid)(pid=pid.pid, start_time=-1.0, child_pid=pid.child_pid,
                           child_start_time=pid.child_start_time, started_at=pid.started_at))
    st = run_status(rd)
    assert st.state == "lost" and "the launcher ended before verification finished" in st.reasons


_REAL = all(importlib.util.find_spec(m) is not None for m in (
    "console.core.config.loader", "console.core.checks.registry", "console.core.checks.context",
    "console.core.records.provenance"))

REAL_CFG = """\
name: verify-real
state_dir: ./state
phases:
  - id: make
    title: Make the output
    run: [sh, -c, "printf 'a\\\\nb\\\\n' > out.txt"]
    verify:
      - exists: out.txt
    outputs: [out.txt]
  - id: forget
    title: Forget to write the output
    run: [sh, -c, "true"]
    verify:
      - exists: missing.txt
"""


@pytest.mark.skipif(not _REAL, reason="the config loader, check registry or provenance module is not there yet")
def test_real_modules_verify_and_record_provenance(tmp_path):
    from console.core.config.loader import load_config
    from console.core.records.provenance import read_record
    from console.core.runs.manager import start_run

    (tmp_path / "pipeline.yaml").write_text(REAL_CFG)
    cfg = load_config(tmp_path / "pipeline.yaml")
    ends = {}
    for ph in ("make", "forget"):
        rd = start_run(cfg, ph)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pid = rd.read_pid()
            if rd.read_exit() and pid and not procs.alive(pid.pid, pid.start_time):
                break
            time.sleep(0.05)  # wait-ok: poll interval
        ends[ph] = (rd, run_status(rd))

    rd, st = ends["make"]
    assert st.state == "succeeded", rd.output_log.read_text()
    assert [r.status for r in st.verify] == ["pass"]
    rec = read_record(cfg.state_dir, "make")
    assert rec is not None and rec["run_id"] == rd.run_id
    assert json.dumps(rec).count("out.txt") >= 1

    rd, st = ends["forget"]
    assert st.state == "failed" and st.exit_code == 0
    assert st.verify[0].status == "fail"
    assert read_record(cfg.state_dir, "forget") is None
