from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from core_harness import ctx_for

from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec

REPO = Path(__file__).resolve().parents[2]


def check(kind, arg, ctx):
    assert validate(kind, arg) is None
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


@pytest.fixture
def booby_trapped(tmp_path, monkeypatch):
    """A package whose import fails loudly: the check must find it without importing it."""
    pkg = tmp_path / "trapped_pkg"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (pkg / "srt" / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (pkg / "srt" / "layer.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("trapped_pkg")]:
        del sys.modules[name]


def test_resolves_a_dotted_module_without_importing_it_or_its_parents(booby_trapped, tmp_path):
    r = check("python_import", "trapped_pkg.srt.layer", ctx_for(tmp_path))
    assert r.status == "pass", r.message
    assert r.evidence["origin"] == str(booby_trapped / "srt" / "layer.py")
    assert "resolves to" in r.message
    assert not any(m.startswith("trapped_pkg") for m in sys.modules)


def test_missing_module_fails_saying_which_part(tmp_path, booby_trapped):
    r = check("python_import", "trapped_pkg.srt.nothing", ctx_for(tmp_path))
    assert r.status == "fail"
    assert "no module named trapped_pkg.srt.nothing" in r.message
    r = check("python_import", "surely_not_installed_xyz", ctx_for(tmp_path))
    assert r.status == "fail" and "cannot be imported by" in r.message
    assert r.evidence["sys_path"]  # where it looked


def test_other_interpreter_in_a_subprocess(tmp_path):
    pkg = tmp_path / "only_here"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    r = check("python_import", {"module": "only_here", "python": sys.executable}, ctx_for(tmp_path))
    assert r.status == "pass", r.message
    assert r.evidence["origin"] == str(pkg / "__init__.py")  # found from the config folder (cwd)
    assert r.evidence["python"] == sys.executable


def test_other_interpreter_missing(tmp_path):
    r = check("python_import", {"module": "json", "python": "envs/sglang/bin/python"}, ctx_for(tmp_path))
    assert r.status == "fail" and "interpreter envs/sglang/bin/python not found" in r.message


def test_module_not_found_by_the_other_interpreter(tmp_path):
    r = check("python_import", {"module": "surely_not_installed_xyz", "python": sys.executable}, ctx_for(tmp_path))
    assert r.status == "fail" and sys.executable in r.message


def test_checks_never_load_torch_into_the_console():
    """python_import of torch, and a run of every local kind, leave torch and sglang unimported."""
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from console.core.checks.context import CheckContext\n"
        "from console.core.checks.registry import run_checks\n"
        "from console.core.model.config import CheckSpec, Config\n"
        "cfg = Config(path=Path('/tmp/x.yaml'), name='t', vars={}, state_dir=Path('/tmp/s'), volumes=(),"
        " phases=(), fingerprint='f')\n"
        "specs = [CheckSpec('python_import', 'torch', 'a'), CheckSpec('python_import', 'torch.nn.functional', 'b'),"
        " CheckSpec('python_import', 'sglang', 'c')]\n"
        "res = run_checks(specs, CheckContext(cfg))\n"
        "print(json.dumps({'status': [r.status for r in res],"
        " 'loaded': sorted(m for m in ('torch', 'sglang') if m in sys.modules)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["loaded"] == []
    assert answer["status"][:2] == ["pass", "pass"]  # torch is installed in the project's venv


def test_bad_module_names():
    assert "dotted module name" in validate("python_import", "sglang-srt")
    assert "needs" in validate("python_import", ["sglang"])
