"""Readable checks: a failing check says what fixes it when the config knows (the phase that
writes a missing path, the variable that names it), a command check says its error rather than
its quoted argv, and `eagle3 check` ends with a count and a one-line summary."""

from __future__ import annotations

import sys
from pathlib import Path

from console.cli import main
from console.core.lifecycle.project import Project

CONFIG = """\
name: hints
vars:
  work: ./work
  sglang_python: /opt/sglang-eagle3-test/bin/python
  chats: ${work}/split/train.jsonl
phases:
  - id: split
    title: Split the dataset
    run: [python3, -c, "pass"]
    outputs: ["${work}/split"]
  - id: serve
    title: Serve the target in SGLang's environment
    python: ${sglang_python}
    run: [python, -c, "pass"]
  - id: regenerate
    title: Regenerate answers
    run: [python3, -c, "pass"]
    checks:
      - exists: ${chats}
        name: chats-present
      - command: [PYTHON, -c, "import sys; print('checking torch'); sys.exit('torch sees 0 GPUs, expected 8')"]
        name: torch-sees-8-gpus
"""


def _project(tmp_path: Path) -> Project:
    cfg = tmp_path / "hints.yaml"
    cfg.write_text(CONFIG.replace("PYTHON", sys.executable))
    return Project.load(cfg)


def test_a_missing_interpreter_names_the_variable_that_sets_it(tmp_path: Path) -> None:
    r = next(r for r in _project(tmp_path).check("serve", journal=False) if r.name == "interpreter")
    assert r.status == "fail" and "/opt/sglang-eagle3-test/bin/python" in r.message
    assert r.message.endswith("set by the variable sglang_python") and r.evidence["variable"] == "sglang_python"


def test_a_missing_input_names_the_phase_that_writes_it(tmp_path: Path) -> None:
    r = next(r for r in _project(tmp_path).check("regenerate", journal=False) if r.name == "chats-present")
    assert r.status == "fail"
    assert "(phase 'split' writes it: eagle3 run " in r.message and r.message.endswith("hints.yaml split)")
    assert r.evidence["made_by"] == "split" and "variable" not in r.evidence  # the phase, not the variable chats


def test_a_command_check_says_its_error_not_its_quoted_argv(tmp_path: Path) -> None:
    r = next(r for r in _project(tmp_path).check("regenerate", journal=False) if r.name == "torch-sees-8-gpus")
    assert r.status == "fail"
    assert r.message == "exited 1, expected 0: torch sees 0 GPUs, expected 8", r.message
    assert r.evidence["argv"][1:3] == ["-c", "import sys; print('checking torch'); sys.exit('torch sees 0 GPUs, expected 8')"]


def test_eagle3_check_ends_with_a_count_and_which_phases_can_start(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    project = _project(tmp_path)
    assert main(["check", str(project.config.path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "6 checks in 3 phases: 3 pass, 0 warn, 3 fail (✗ blocks the start); 1 of 3 can start now: split"
    assert not any("'\"'\"'" in line or "`" in line for line in out)  # no shell-quoted argv anywhere
