"""A value from `${env:...}` reaches the phase, yet no file under the state dir and no
CLI output holds it; the state dir is the owner's alone."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

from core_harness import wait_for

from console.cli import main
from console.core.lifecycle.project import Project
from console.core.runs import manager

TOKEN = "hf_s3cr3t-T0KEN-value-42"

CFG = textwrap.dedent("""\
    vars:
      token: ${env:EAGLE3_TEST_TOKEN}
    state_dir: ./state
    phases:
      - id: use
        run:
          - python
          - -c
          - |
            import os, sys
            ok = sys.argv[1] == os.environ["EAGLE3_TEST_TOKEN"] == os.environ["AUTH"]
            os.makedirs("out", exist_ok=True)
            open("out/ok-" + sys.argv[1] + ".txt", "w").write(str(ok))
            print("phase saw the right token:", ok)
            sys.exit(0 if ok else 4)
          - ${token}
        env: {AUTH: "${env:EAGLE3_TEST_TOKEN}"}
        checks:
          - command: [python, -c, "import sys; print('token', sys.argv[1])", "${token}"]
        verify:
          - command: [python, -c, "import sys; print('verified', sys.argv[1])", "${token}"]
          - exists: out/ok-${token}.txt
        outputs: ["out/ok-${token}.txt"]
""")


def test_env_secret_reaches_the_phase_but_no_file_under_the_state_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EAGLE3_TEST_TOKEN", TOKEN)
    cfg = tmp_path / "p.yaml"
    cfg.write_text(CFG)
    assert main(["check", str(cfg)]) == 0
    p = Project.load(cfg)
    rd = p.start("use")
    wait_for(lambda: manager.run_status(rd).state not in ("running", "verifying"), 60, "the run to end")
    assert manager.run_status(rd).state == "succeeded", rd.output_log.read_text()
    assert (tmp_path / "out" / f"ok-{TOKEN}.txt").read_text() == "True"
    assert [s.state for s in p.statuses()] == ["done"]  # provenance finds the real output path
    for argv in (["status", str(cfg)], ["journal", str(cfg)], ["journal", str(cfg), "--json"],
                 ["logs", str(cfg), "use"], ["check", str(cfg), "--json"]):
        assert main(argv) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert "${env:EAGLE3_TEST_TOKEN}" in out.out  # the journal names the variable instead

    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    files = [Path(d) / f for d, _, fs in os.walk(state) for f in fs]
    assert len(files) >= 8  # journal, argv, pid, exit, output, events, verify, provenance, lock
    for f in files:
        assert TOKEN.encode() not in f.read_bytes(), f
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f"{f} is {oct(f.stat().st_mode)}"


def test_a_notifier_that_echoes_the_secret_is_journaled_without_it(tmp_path, monkeypatch):
    import sys

    from console.core.lifecycle.notify import Notifier

    monkeypatch.setenv("EAGLE3_TEST_TOKEN", TOKEN)
    cfg = tmp_path / "p.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        state_dir: ./state
        notify:
          - run: ["{sys.executable}", -c, "import sys; print('posted with', sys.argv[1])", "${{env:EAGLE3_TEST_TOKEN}}"]
            on: [failed]
        phases:
          - id: x
            run: [true]
        """))
    p = Project.load(cfg)
    assert Notifier(p.config, p.journal).fire("failed", "x", "failed", "r1", "exit 3") == 1
    rec = wait_for(lambda: p.journal.read(events={"notify"}), 30, "the notify record")[-1]
    assert rec["output"] == "posted with ${env:EAGLE3_TEST_TOKEN}"
    assert TOKEN.encode() not in (tmp_path / "state" / "journal.jsonl").read_bytes()


def test_an_existing_state_dir_is_tightened_but_a_shared_folder_is_not(tmp_path):
    import stat as st

    from console.core.records.journal import Journal

    old = tmp_path / "old-state"
    (old / "runs").mkdir(parents=True)
    old.chmod(0o755)
    Journal(old).append("checks", phase="x")
    assert st.S_IMODE(old.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    Journal(shared).append("checks", phase="x")
    assert st.S_IMODE(shared.stat().st_mode) == 0o1777
    assert st.S_IMODE((shared / "journal.jsonl").stat().st_mode) == 0o600
