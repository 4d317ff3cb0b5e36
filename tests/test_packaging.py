"""What a user gets from `pip install eagle3-console`: the themes inside the wheel (not
only in a checkout), an interpreter floor the code really needs, and no unused dependency."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_a_wheel_install_loads_the_console_themes(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("console", "pipeline"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", str(src), "-w", str(tmp_path / "dist")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("eagle3_console-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    probe = ("from console.ui.theming import THEMES_DIR, load_themes; "
             "print(THEMES_DIR); print(' '.join(t.name for t in load_themes())); "
             "print(next(t.primary for t in load_themes() if t.name == 'eagle3-dark'))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    where, names, primary = out.stdout.splitlines()
    assert Path(where).is_relative_to(site) and Path(where).is_dir()
    assert primary.upper() == "#5FA8D3"  # ours, not the built-in fallback's
    assert {"eagle3-dark", "eagle3-light", "eagle3-ansi"} <= set(names.split())
    assert (site / "console" / "ui" / "console.tcss").exists()


def test_python_floor_matches_what_the_code_uses():
    spec = pyproject()["project"]["requires-python"]
    floor = tuple(int(x) for x in re.match(r">=\s*(\d+)\.(\d+)", spec).groups())
    uses_process_group = any("process_group=" in p.read_text()
                             for p in (ROOT / "console").rglob("*.py"))
    if uses_process_group:  # subprocess.Popen(process_group=...) is new in 3.11
        assert floor >= (3, 11), spec


def test_every_declared_dependency_is_imported():
    deps = [re.split(r"[<>=!~\[ ]", d)[0] for d in pyproject()["project"]["dependencies"]]
    modules = {"nvidia-ml-py": "pynvml", "pyyaml": "yaml"}
    code = "\n".join(p.read_text() for pkg in ("console", "pipeline") for p in (ROOT / pkg).rglob("*.py"))
    for dep in deps:
        mod = modules.get(dep, dep).replace("-", "_")
        assert re.search(rf"^\s*(import|from) {mod}\b", code, re.M), f"{dep} is declared but never imported"
