from __future__ import annotations

import sys

from core_harness import ctx_for

from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec, Phase


def check(arg, ctx):
    assert validate("command", arg) is None
    return run_checks([CheckSpec(kind="command", arg=arg, name=default_name("command", arg))], ctx)[0]


def test_exit_zero_passes_with_output(tmp_path):
    r = check([sys.executable, "-c", "print('driver ok')"], ctx_for(tmp_path))
    assert r.status == "pass"
    assert r.evidence["exit_code"] == 0 and r.evidence["output_tail"] == ["driver ok"]
    assert r.message.endswith("exited 0: driver ok")


def test_nonzero_exit_fails_with_the_last_lines(tmp_path):
    code = "import sys; print('checking'); sys.stderr.write('CUDA error: no device\\n'); sys.exit(3)"
    r = check({"argv": [sys.executable, "-c", code]}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert "exited 3, expected 0: CUDA error: no device" in r.message
    assert r.evidence["output_tail"] == ["checking", "CUDA error: no device"]


def test_expected_nonzero_and_string_argv_split_without_a_shell(tmp_path):
    (tmp_path / "marker").write_text("x")
    # A string is split like a shell would, but never run by one: `;` is just an argument.
    r = check({"argv": f"{sys.executable} -c 'import sys; sys.exit(2)' ; rm marker", "expect": 2}, ctx_for(tmp_path))
    assert r.status == "pass", r.message
    assert (tmp_path / "marker").exists()


def test_runs_in_the_config_folder_with_the_phase_env(tmp_path):
    phase = Phase(id="p", title="P", argv=("true",), env={"EAGLE3_TEST_VAR": "42"})
    code = "import os; print(os.getcwd(), os.environ['EAGLE3_TEST_VAR'])"
    r = check([sys.executable, "-c", code], ctx_for(tmp_path, phase=phase))
    assert r.status == "pass" and r.evidence["output_tail"] == [f"{tmp_path} 42"]


def test_timeout_kills_and_fails(tmp_path):
    r = check({"argv": [sys.executable, "-c", "import time; print('start', flush=True); time.sleep(30)"],  # wait-ok: the phase program's own work, not a test pause
               "timeout": 0.5}, ctx_for(tmp_path))
    assert r.status == "fail" and "did not finish within 0.5 s" in r.message
    assert r.evidence["output_tail"] == ["start"]


def test_missing_program(tmp_path):
    r = check(["nvidia-smi-not-here"], ctx_for(tmp_path))
    assert r.status == "fail" and "command not found on PATH: nvidia-smi-not-here" in r.message


def test_bad_command_arguments():
    assert "empty" in validate("command", [])
    assert "cannot be split" in validate("command", "echo 'unterminated")
    assert "did you mean 'expect'" in validate("command", {"argv": ["true"], "expected": 1})
    assert default_name("command", ["/usr/bin/nvidia-smi", "-L"]) == "command:nvidia-smi -L"
