"""`eagle3 check` looks and touches nothing: on a machine the project never ran on it
creates no state folder, and a state folder it could not create is one more failing check
in a full report, not an error that hides the rest."""

from __future__ import annotations

import json
import textwrap

from core_harness import wait_for

from console.cli import main
from console.core.lifecycle.project import Project
from console.core.runs import manager

CFG = textwrap.dedent("""\
    state_dir: {state}
    phases:
      - id: make
        run: [python, -c, "pass"]
        checks:
          - exists: missing-input.txt
""")


def _config(tmp_path, state: str):
    (tmp_path / "p.yaml").write_text(CFG.format(state=state))
    return tmp_path / "p.yaml"


def test_check_on_a_fresh_machine_creates_no_state_folder(tmp_path, capsys):
    cfg = _config(tmp_path, "./deep/state")
    assert main(["check", str(cfg)]) == 1
    assert "missing-input.txt" in capsys.readouterr().out
    assert not (tmp_path / "deep").exists()


def test_a_state_folder_that_cannot_be_created_is_a_failing_check_beside_the_others(tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a folder\n")
    cfg = _config(tmp_path, "./a-file/state")
    assert main(["check", "--json", str(cfg)]) == 1
    report = json.loads(capsys.readouterr().out)
    names = {r["name"]: r for r in report["phases"]["make"]}
    assert names["state_dir"]["status"] == "fail"
    assert "a-file is not a folder" in names["state_dir"]["message"]
    assert any("missing-input.txt" in r["message"] for r in report["phases"]["make"] if r["name"] != "state_dir")


def test_a_start_still_journals_its_checks(tmp_path):
    cfg = _config(tmp_path, "./state")
    (tmp_path / "missing-input.txt").write_text("here now\n")
    p = Project.load(cfg)
    p.check("make")
    assert not (tmp_path / "state").exists()
    rd = p.start("make")
    wait_for(lambda: manager.run_status(rd).state not in ("running", "verifying"), 30, "make to end")
    events = [json.loads(line)["event"] for line in (tmp_path / "state" / "journal.jsonl").read_text().splitlines()]
    assert "checks" in events
