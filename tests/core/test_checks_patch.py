from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from core_harness import ctx_for

from console.core.checks import patch as patch_kind
from console.core.checks.patch import parse_unified_diff
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec

ORIGINAL = [f"line {i}\n" for i in range(1, 41)]
PATCHED = list(ORIGINAL)
PATCHED[4] = "line 5 capture_aux_hidden_states = True\n"
PATCHED[30:30] = ["    # eagle3: keep the layer inputs\n", "    aux.append(hidden)\n"]
OTHER_ORIG = ["def f():\n", "    return 1\n"]
OTHER_PATCHED = ["def f():\n", "    return 2\n"]


def check(arg, ctx):
    assert validate("patch_applied", arg) is None
    return run_checks([CheckSpec(kind="patch_applied", arg=arg, name=default_name("patch_applied", arg))], ctx)[0]


def diff(rel, before, after):
    return "".join(difflib.unified_diff(before, after, fromfile=f"a/{rel}", tofile=f"b/{rel}"))


@pytest.fixture
def tree(tmp_path):
    """site/fakesgl/srt/models/llama.py and fakesgl/utils.py, and a patch touching both."""
    site = tmp_path / "site"
    models = site / "fakesgl" / "srt" / "models"
    models.mkdir(parents=True)
    (site / "fakesgl" / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (models / "llama.py").write_text("".join(ORIGINAL))
    (site / "fakesgl" / "utils.py").write_text("".join(OTHER_ORIG))
    patch = diff("fakesgl/srt/models/llama.py", ORIGINAL, PATCHED) + diff("fakesgl/utils.py", OTHER_ORIG, OTHER_PATCHED)
    (tmp_path / "eagle3.patch").write_text("diff --git a/x b/x\nindex 123..456 100644\n" + patch)
    return site


def apply(site):
    (site / "fakesgl" / "srt" / "models" / "llama.py").write_text("".join(PATCHED))
    (site / "fakesgl" / "utils.py").write_text("".join(OTHER_PATCHED))


def test_parser_reads_files_and_hunks(tree, tmp_path):
    files = parse_unified_diff((tmp_path / "eagle3.patch").read_text())
    assert [f.new for f in files] == ["b/fakesgl/srt/models/llama.py", "b/fakesgl/utils.py"]
    assert [len(f.hunks) for f in files] == [2, 1]


def test_unpatched_tree_fails_naming_file_and_hunk(tree, tmp_path):
    r = check({"patch": "eagle3.patch", "root": "site"}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.message.startswith("fakesgl/srt/models/llama.py hunk 1/2 (@@ -2,7 +2,7 @@)")
    assert "not applied: its original lines are still there" in r.message
    assert r.evidence["hunks_applied"] == 0 and r.evidence["hunks_total"] == 3
    assert "0/3 hunks applied" in r.message


def test_patched_tree_passes(tree, tmp_path):
    apply(tree)
    r = check({"patch": "eagle3.patch", "root": "site"}, ctx_for(tmp_path))
    assert r.status == "pass", r.message
    assert r.message == f"eagle3.patch: all 3 hunks applied in 2 files under {tree}"
    assert r.evidence["files"] == ["fakesgl/srt/models/llama.py", "fakesgl/utils.py"]


def test_partly_applied_and_a_file_that_differs_from_both(tree, tmp_path):
    apply(tree)
    (tree / "fakesgl" / "utils.py").write_text("def f():\n    return 3\n")  # someone edited it by hand
    r = check({"patch": "eagle3.patch", "root": "site"}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.message.startswith("fakesgl/utils.py hunk 1/1")
    assert "differs from both" in r.message and "2/3 hunks applied" in r.message


def test_root_found_from_the_module_without_importing_it(tree, tmp_path, monkeypatch):
    apply(tree)
    monkeypatch.syspath_prepend(str(tree))
    r = check({"patch": "eagle3.patch", "module": "fakesgl"}, ctx_for(tmp_path))
    assert r.status == "pass", r.message
    assert r.evidence["root"] == str(tree)
    assert "fakesgl" not in sys.modules


def test_module_in_another_interpreter(tree, tmp_path):
    # The sglang venv is not the console's: find the package with that interpreter.
    apply(tree)
    (tree / "eagle3.patch").write_text((tmp_path / "eagle3.patch").read_text())
    # The config folder is site/, the subprocess's cwd, so that interpreter finds fakesgl there.
    r = check({"patch": "eagle3.patch", "module": "fakesgl", "python": sys.executable}, ctx_for(tree))
    assert r.status == "pass", r.message
    assert r.evidence["root"] == str(tree)


def test_missing_target_file_and_missing_module(tree, tmp_path):
    (tree / "fakesgl" / "utils.py").unlink()
    apply_llama = tree / "fakesgl" / "srt" / "models" / "llama.py"
    apply_llama.write_text("".join(PATCHED))
    r = check({"patch": "eagle3.patch", "root": "site"}, ctx_for(tmp_path))
    assert r.status == "fail" and "fakesgl/utils.py: the file does not exist" in r.message
    r = check({"patch": "eagle3.patch", "module": "not_installed_xyz"}, ctx_for(tmp_path))
    assert r.status == "fail" and "cannot find module not_installed_xyz" in r.message


def test_new_file_patch(tmp_path):
    (tmp_path / "new.patch").write_text(diff("pkg/added.py", [], ["x = 1\n"]).replace("a/pkg/added.py", "/dev/null"))
    r = check({"patch": "new.patch"}, ctx_for(tmp_path))
    assert r.status == "fail" and "not applied: the patch creates it" in r.message
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "added.py").write_text("x = 1\n")
    assert check({"patch": "new.patch"}, ctx_for(tmp_path)).status == "pass"


def test_not_a_diff(tmp_path):
    (tmp_path / "x.patch").write_text("hello\n")
    r = check({"patch": "x.patch"}, ctx_for(tmp_path))
    assert r.status == "fail" and "no file changes" in r.message
    (tmp_path / "y.patch").write_text("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n")
    r = check({"patch": "y.patch"}, ctx_for(tmp_path))
    assert r.status == "fail" and "not a valid unified diff" in r.message


def test_bad_patch_arguments():
    assert "root or module, not both" in validate("patch_applied", {"patch": "p", "root": "r", "module": "m"})
    assert "did you mean 'strip'" in validate("patch_applied", {"patch": "p", "strp": 1})


# -- the form without a diff: python -m pipeline.patch verify ------------------------------------

REPO = Path(__file__).resolve().parents[2]


def sglang_model_file(name: str) -> Path:
    """A file of the real SGLang 0.5.23 wheel (tests/pipeline/sglang_wheel.py fetches and caches it)."""
    spec = importlib.util.spec_from_file_location("sglang_wheel_for_core", REPO / "tests" / "pipeline" / "sglang_wheel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.unpacked_source() / "sglang" / "srt" / "models" / name


def fake_python(tmp_path: Path, stdout: str, code: int, sleep: int = 0) -> Path:
    """An 'interpreter' that records how it was called and answers like the verifier would."""
    exe = tmp_path / "fakepy"
    exe.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/argv\necho \"$PYTHONPATH\" > {tmp_path}/pythonpath\n"
                   f"sleep {sleep}\nprintf '%s' '{stdout}'\necho 'No module named pipeline.patch' >&2\nexit {code}\n")
    exe.chmod(0o755)
    return exe


def test_the_module_and_file_forms_validate_and_name_themselves():
    assert validate("patch_applied", {"module": "sglang.srt.models.deepseek_v2"}) is None
    assert validate("patch_applied", {"file": "models/llama.py", "python": "/envs/sgl/bin/python"}) is None
    assert default_name("patch_applied", {"module": "sglang.srt.models.deepseek_v2"}) == \
        "patch_applied:sglang.srt.models.deepseek_v2"
    assert default_name("patch_applied", {"file": "x/llama.py"}) == "patch_applied:llama.py"
    assert "one of module or file" in validate("patch_applied", {"module": "a.b", "file": "f.py"})
    assert "one of module or file" in validate("patch_applied", {})
    assert "file is for the form without patch" in validate("patch_applied", {"patch": "p", "file": "f.py"})
    assert "root is used only with patch" in validate("patch_applied", {"module": "a.b", "root": "r"})
    assert "strip is used only with patch" in validate("patch_applied", {"file": "f.py", "strip": 1})


def test_the_real_verifier_on_a_real_sglang_file(tmp_path):
    target = tmp_path / "deepseek_v2.py"
    shutil.copyfile(sglang_model_file("deepseek_v2.py"), target)
    r = check({"file": "deepseek_v2.py"}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.message.startswith(f"not applied: original sglang 0.5.23 deepseek_v2.py {target}")
    assert r.message.endswith(f"run python -m pipeline.patch apply --file {target}")
    done = subprocess.run([sys.executable, "-m", "pipeline.patch", "apply", "--file", str(target)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    r = check({"file": "deepseek_v2.py"}, ctx_for(tmp_path))
    assert r.status == "pass" and r.message == f"patched sglang 0.5.23 deepseek_v2.py {target}"
    assert r.evidence["state"] == "patched" and r.evidence["exit"] == 0
    target.write_bytes(target.read_bytes() + b"# tweak\n")
    r = check({"file": "deepseek_v2.py"}, ctx_for(tmp_path))
    assert r.status == "fail" and r.message.startswith("unknown ") and "supported: sglang 0.5.23" in r.message


def test_the_verifier_runs_in_the_named_interpreter_with_this_pipeline_on_its_path(tmp_path):
    exe = fake_python(tmp_path, "original sglang 0.5.23 deepseek_v2.py /site/sglang/srt/models/deepseek_v2.py", 1)
    r = check({"module": "sglang.srt.models.deepseek_v2", "python": str(exe)}, ctx_for(tmp_path))
    assert (tmp_path / "argv").read_text().split() == ["-m", "pipeline.patch", "verify", "--module",
                                                       "sglang.srt.models.deepseek_v2"]
    assert (tmp_path / "pythonpath").read_text().strip().split(os.pathsep)[0] == str(REPO)
    assert r.status == "fail" and r.message.startswith("not applied: original sglang 0.5.23")
    assert r.message.endswith("run python -m pipeline.patch apply --module sglang.srt.models.deepseek_v2")


def test_an_interpreter_that_cannot_run_the_verifier_is_a_failure_saying_why(tmp_path, monkeypatch):
    exe = fake_python(tmp_path, "", 1)
    r = check({"module": "sglang.srt.models.llama", "python": str(exe)}, ctx_for(tmp_path))
    assert r.status == "fail" and "failed (exit 1): No module named pipeline.patch" in r.message
    r = check({"module": "not_installed_xyz.models.llama"}, ctx_for(tmp_path))
    assert r.status == "fail" and r.message.startswith("--module not_installed_xyz.models.llama cannot be found")
    assert "SGLang environment's interpreter" in r.message
    r = check({"module": "sglang.srt.models.llama", "python": str(tmp_path / "nope")}, ctx_for(tmp_path))
    assert r.status == "fail" and "not found" in r.message
    monkeypatch.setattr(patch_kind, "VERIFY_TIMEOUT", 0.5)
    slow = fake_python(tmp_path, "patched", 0, sleep=30)
    r = check({"module": "sglang.srt.models.llama", "python": str(slow)}, ctx_for(tmp_path))
    assert r.status == "fail" and "did not answer within 0.5 s" in r.message
