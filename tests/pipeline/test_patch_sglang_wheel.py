"""The dump patch on the real SGLang 0.5.23 files (from the wheel; sglang_wheel.py says where
it comes from): the patcher CLI end to end, and where the injected lines land."""

from __future__ import annotations

import ast
import hashlib
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_wheel import sglang_source  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
FILES = {"deepseek_v2.py": "DeepseekV2ForCausalLM", "llama.py": "LlamaForCausalLM"}


def patch_cli(action: str, *where: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.patch", action, *where], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(params=sorted(FILES))
def model_file(request, sglang_source, tmp_path) -> Path:  # noqa: F811
    """A private copy of one model file of the wheel."""
    src = sglang_source / "sglang" / "srt" / "models" / request.param
    dst = tmp_path / request.param
    shutil.copyfile(src, dst)
    return dst


def test_apply_verify_compile_reapply_revert_on_the_real_file(model_file, tmp_path):
    original = model_file.read_bytes()
    assert patch_cli("status", "--file", str(model_file)).stdout.startswith("original sglang 0.5.23 ")
    assert patch_cli("verify", "--file", str(model_file)).returncode == 1

    done = patch_cli("apply", "--file", str(model_file))
    assert done.returncode == 0, done.stderr
    patched = model_file.read_bytes()
    assert patched != original
    assert (tmp_path / f"{model_file.name}.eagle3-orig").read_bytes() == original
    assert patch_cli("verify", "--file", str(model_file)).returncode == 0
    py_compile.compile(str(model_file), cfile=str(tmp_path / "out.pyc"), doraise=True)

    again = patch_cli("apply", "--file", str(model_file))
    assert again.returncode == 0 and again.stdout.startswith("already patched")
    assert model_file.read_bytes() == patched

    back = patch_cli("revert", "--file", str(model_file))
    assert back.returncode == 0, back.stderr
    assert hashlib.sha256(model_file.read_bytes()).digest() == hashlib.sha256(original).digest()
    assert model_file.read_bytes() == original
    assert not (tmp_path / f"{model_file.name}.eagle3-orig").exists()


def test_a_modified_original_is_refused_naming_the_supported_versions(model_file):
    text = model_file.read_bytes().replace(b"self.capture_aux_hidden_states = False",
                                           b"self.capture_aux_hidden_states = False  # local tweak", 1)
    model_file.write_bytes(text)
    done = patch_cli("apply", "--file", str(model_file))
    assert done.returncode == 3
    assert "sglang 0.5.23 deepseek_v2.py" in done.stderr and "sglang 0.5.23 llama.py" in done.stderr
    assert model_file.read_bytes() == text
    assert patch_cli("status", "--file", str(model_file)).stdout.startswith("unknown ")


def test_a_patched_file_edited_by_hand_is_neither_verified_nor_reverted(model_file):
    assert patch_cli("apply", "--file", str(model_file)).returncode == 0
    edited = model_file.read_bytes() + b"\n# edited after patching\n"
    model_file.write_bytes(edited)
    assert patch_cli("verify", "--file", str(model_file)).returncode == 1
    done = patch_cli("revert", "--file", str(model_file))
    assert done.returncode == 3 and ".eagle3-orig" in done.stderr
    assert model_file.read_bytes() == edited


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls}.{name} not found")


def _mentions(node: ast.AST, attr: str) -> list[int]:
    return [n.lineno for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == attr]


def test_the_hook_lands_in_the_causal_lm_between_unpacking_and_the_logits(model_file):
    assert patch_cli("apply", "--file", str(model_file)).returncode == 0
    tree = ast.parse(model_file.read_text(encoding="utf-8"))
    cls = FILES[model_file.name]
    init = _method(tree, cls, "__init__")
    assert _mentions(init, "_eagle3_dump"), "__init__ does not attach the dump hook"
    forward = _method(tree, cls, "forward")
    hook_lines = [n.lineno for n in ast.walk(forward) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and n.func.attr == "_eagle3_dump"]
    unpack = min(_mentions(forward, "capture_aux_hidden_states"))
    logits = min(_mentions(forward, "logits_processor"))
    assert len(hook_lines) == 1 and unpack < hook_lines[0] < logits
    # The hook is called outside the `if self.capture_aux_hidden_states:` block, at the
    # forward's own level, so its condition is the hook and nothing else.
    top = [n for n in forward.body if isinstance(n, ast.If) and "_eagle3_dump" in ast.unparse(n.test)]
    assert len(top) == 1


def test_the_module_is_found_without_importing_sglang(sglang_source, tmp_path):  # noqa: F811
    # A copy of the package whose __init__ would fail if imported, on this interpreter's path.
    site = tmp_path / "site"
    (site / "sglang" / "srt" / "models").mkdir(parents=True)
    (site / "sglang" / "srt" / "models" / "llama.py").write_bytes(
        (sglang_source / "sglang" / "srt" / "models" / "llama.py").read_bytes())
    for pkg in ("sglang", "sglang/srt", "sglang/srt/models"):
        (site / pkg / "__init__.py").write_text("raise RuntimeError('sglang was imported')\n")
    env = {"PYTHONPATH": f"{REPO}:{site}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pipeline.patch", "apply", "--module", "sglang.srt.models.llama"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert str(site / "sglang" / "srt" / "models" / "llama.py") in done.stdout
    done = subprocess.run([sys.executable, "-m", "pipeline.patch", "verify", "--module", "sglang.srt.models.llama"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
