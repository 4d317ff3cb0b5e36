"""What a phase's state means does not depend on where the project lives or who asks:
a moved project checks its own files, a signal is named, a service is ready by one rule."""

from __future__ import annotations

import shutil
import textwrap

from core_harness import wait_for

from console.cli import main
from console.core.lifecycle.project import Project
from console.core.runs import manager

CFG = textwrap.dedent("""\
    state_dir: ./state
    phases:
      - id: make
        run: [python, -c, "import shutil; shutil.copy('in.txt', 'out.txt')"]
        inputs: [in.txt]
        outputs: [out.txt]
      - id: crash
        run: [python, -c, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
      - id: serve
        kind: service
        run: [python, -c, "import time; time.sleep(60)"]  # wait-ok: the phase program's own work, not a test pause
        ready:
          - exists: never-there.txt
            severity: warning
""")


def finished(p: Project, phase: str) -> str:
    rd = p.start(phase)
    wait_for(lambda: manager.run_status(rd).state not in ("running", "verifying"), 30, f"{phase} to end")
    return manager.run_status(rd).state


def test_a_copied_project_checks_its_own_inputs(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    (a / "p.yaml").write_text(CFG)
    (a / "in.txt").write_text("one\n")
    assert finished(Project.load(a / "p.yaml"), "make") == "succeeded"
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert Project.load(b / "p.yaml").status("make").state == "done"
    (b / "in.txt").write_text("two\n")
    st = Project.load(b / "p.yaml").status("make")
    assert st.state == "stale" and str(b / "in.txt") in st.reason
    assert Project.load(a / "p.yaml").status("make").state == "done"


def test_a_phase_killed_by_a_signal_names_it(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text(CFG)
    p = Project.load(tmp_path / "p.yaml")
    assert finished(p, "crash") == "failed"
    st = p.status("crash")
    assert st.state == "failed" and st.reason == "killed by SIGKILL"
    assert main(["journal", str(tmp_path / "p.yaml")]) == 0
    assert "killed by SIGKILL" in capsys.readouterr().out


def test_statuses_and_readiness_agree_on_a_service(tmp_path):
    (tmp_path / "p.yaml").write_text(CFG)
    p = Project.load(tmp_path / "p.yaml")
    p.start("serve")
    try:
        wait_for(lambda: p.status("serve").state == "running", 30, "serve to run")
        ok, results = manager.readiness(p.config, "serve")
        assert [r.status for r in results] == ["warn"]
        assert ok is True and p.status("serve").service_ready is True
    finally:
        p.stop("serve", grace=2)
