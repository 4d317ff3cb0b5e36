"""`python:` names the interpreter that `python` means, for a whole config or one phase:
in `run:`, in command checks, in `values: {command: ...}` and in python_import."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from core_harness import wait_for

from console.core.checks.context import CheckContext
from console.core.checks.registry import run_checks
from console.core.config.loader import load_config
from console.core.lifecycle.project import PYTHON_CHECK, Blocked, Project
from console.core.model.config import CheckSpec
from console.core.runs import manager
from console.core.text.errors import ConfigError


def fake_env(root: Path, name: str) -> Path:
    """envs/<name>/bin/python: a wrapper that notes each use, then runs this interpreter."""
    exe = root / "envs" / name / "bin" / "python"
    exe.parent.mkdir(parents=True)
    exe.write_text(f'#!/bin/sh\necho "{name} $*" >> "{root}/used-{name}.txt"\nexec "{sys.executable}" "$@"\n')
    exe.chmod(0o755)
    return exe


def uses(root: Path, name: str) -> str:
    p = root / f"used-{name}.txt"
    return p.read_text() if p.exists() else ""


CFG = """\
name: py
vars:
  env: envs/a
python: ${env}/bin/python
state_dir: ./state
phases:
  - id: whole
    run: [python, -c, "import sys; print('ran', sys.argv)"]
  - id: own
    python: envs/b/bin/python
    run: [python, -c, "print('own')"]
"""


def project(tmp_path: Path, text: str = CFG) -> Project:
    (tmp_path / "p.yaml").write_text(text)
    return Project.load(tmp_path / "p.yaml")


def test_config_python_is_relative_to_the_config_folder_and_interpolated(tmp_path):
    cfg = project(tmp_path).config
    assert cfg.python == str(tmp_path / "envs/a/bin/python")
    assert cfg.python_for(cfg.phase("whole")) == str(tmp_path / "envs/a/bin/python")
    assert cfg.python_for(cfg.phase("own")) == str(tmp_path / "envs/b/bin/python")


def test_a_phase_runs_under_the_configured_interpreter(tmp_path):
    fake_env(tmp_path, "a")
    fake_env(tmp_path, "b")
    p = project(tmp_path)
    for pid in ("whole", "own"):
        rd = p.start(pid)
        wait_for(lambda rd=rd: manager.run_status(rd).state == "succeeded", 30, f"{pid} to finish")
    assert "-c import sys" in uses(tmp_path, "a")
    assert "-c print('own')" in uses(tmp_path, "b")
    argv = manager.latest_run(p.config.state_dir, "own").read_argv()
    assert argv["argv"][0] == str(tmp_path / "envs/b/bin/python")
    assert argv["env"]["PATH"].split(":")[0] == str(tmp_path / "envs/b/bin")


def test_check_commands_and_value_commands_use_it(tmp_path):
    fake_env(tmp_path, "a")
    cfg = project(tmp_path).config
    ctx = CheckContext(cfg, cfg.phase("whole"))
    specs = [
        CheckSpec("command", {"argv": ["python", "-c", "print('cmd-check')"]}, "cmd"),
        CheckSpec("free_space", {"path": ".", "need": "n * 1", "values": {
            "n": {"command": ["python", "-c", "print(1)"]}}}, "space"),
        CheckSpec("python_import", {"module": "json"}, "imp"),
    ]
    results = run_checks(specs, ctx)
    assert [r.status for r in results] == ["pass", "pass", "pass"], [r.message for r in results]
    used = uses(tmp_path, "a")
    assert "print('cmd-check')" in used and "print(1)" in used and "json" in used


def test_a_missing_interpreter_blocks_the_phase_with_one_clear_line(tmp_path):
    p = project(tmp_path)
    results = p.check("whole", journal=False)
    bad = [r for r in results if r.name == PYTHON_CHECK]
    assert bad and bad[0].status == "fail"
    assert str(tmp_path / "envs/a/bin/python") in bad[0].message and "does not exist" in bad[0].message
    with pytest.raises(Blocked):
        p.start("whole")
    cmd = run_checks([CheckSpec("command", {"argv": ["python", "-V"]}, "cmd")],
                     CheckContext(p.config, p.config.phase("whole")))[0]
    assert cmd.status == "fail" and "envs/a/bin/python" in cmd.message


def test_without_python_key_nothing_changes(tmp_path):
    p = project(tmp_path, "phases:\n  - id: x\n    run: [python, -V]\n")
    assert p.config.python is None
    assert all(r.name != PYTHON_CHECK for r in p.check("x", journal=False))
    rd = p.start("x")
    wait_for(lambda: manager.run_status(rd).state == "succeeded", 30, "x to finish")
    assert rd.read_argv()["argv"][0] == sys.executable


def test_a_python_with_options_is_refused_naming_the_key(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        phases:
          - id: x
            python: python3 -u
            run: [python, -V]
        """))
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "p.yaml")
    assert "p.yaml:3: phases.x.python" in str(e.value)
