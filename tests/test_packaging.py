"""What a user gets from `pip install eagle3-console`: a console that starts with its own
themes from the installed wheel (not only from a checkout), an interpreter floor the code
really needs, and no unused dependency."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


CONFIG = """\
name: wheel
state_dir: ./state
volumes: ["."]
phases:
  - id: hello
    title: Say hello
    run: [python3, -c, "print('hello')"]
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The wheel a user's `pip install` gets, built from a copy of the tracked tree (no build/ left here)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("console", "pipeline", "themes"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", str(src), "-w", str(tmp / "dist")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (tmp / "dist").glob("eagle3_console-*.whl")
    return built


def fresh_venv(root: Path, wheel: Path) -> Path:
    """A new virtualenv with only the wheel installed (no network, no deps). The running
    interpreter's site-packages is appended afterwards for the dependencies: after, so pip never
    sees that environment's eagle3-console, and as a plain path, so the editable install of the
    checkout there (a .pth import hook) stays inactive."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    # a checkout on PYTHONPATH has an egg-info that passes for an installed eagle3-console
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                           "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=240, env=clean)
    assert done.returncode == 0, done.stdout + done.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "outer-deps.pth").write_text("".join(f"{d}\n" for d in deps))
    return python


def test_the_wheel_carries_the_themes_without_claiming_the_themes_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "themes/eagle3.py" in names and "console/ui/console.tcss" in names
    assert "themes/__init__.py" not in names  # another distribution's `themes` may own that file


def test_a_wheel_install_starts_the_console_with_its_own_theme(tmp_path: Path, wheel: Path) -> None:
    venv = tmp_path / "venv"
    python = fresh_venv(venv, wheel)
    home = tmp_path / "home"  # outside the checkout: nothing there shadows the installed packages
    home.mkdir()
    (home / "cfg.yaml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    probe = ("import console, console.ui.theming as t; print(console.__file__); print(t.themes_dir()); "
             "print(' '.join(x.name for x in t.load_themes())); "
             "print(next(x.primary for x in t.load_themes() if x.name == 'eagle3-dark'))")
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=home, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    console_file, where, names, primary = out.stdout.splitlines()
    assert Path(console_file).is_relative_to(venv), console_file
    assert Path(where).is_relative_to(venv), where
    assert {"eagle3-dark", "eagle3-light", "eagle3-ansi"} <= set(names.split())
    assert primary.upper() == "#5FA8D3"  # ours: the fallback renames a built-in theme

    shot = tmp_path / "shot.svg"
    env.update(EAGLE3_SCREENSHOT=str(shot), EAGLE3_SCREENSHOT_AFTER="0.5", EAGLE3_SCREENSHOT_SIZE="100x30")
    run = subprocess.run([str(venv / "bin" / "eagle3"), "console", "cfg.yaml", "--theme", "light"],
                         capture_output=True, text=True, cwd=home, env=env, stdin=subprocess.DEVNULL, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    svg = shot.read_text().replace("&#160;", " ").upper()
    assert "PHASES · WHEEL" in svg  # the console's main screen, for this config
    assert "#FAFBFC" in svg  # eagle3-light's background, not the built-in textual-light's


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


def test_the_readme_names_every_doc_and_every_demo_phase():
    """The README is a new user's map: a doc it leaves out is never found, and a demo phase
    missing from its table is one the user meets unexplained."""
    from console.core.config.loader import load_config

    readme = (ROOT / "README.md").read_text()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"`docs/{doc.name}`" in readme, f"README.md never names docs/{doc.name}"
    section = readme.split("## The demo pipeline", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M)
    phases = [p.id for p in load_config(ROOT / "configs" / "demo.yaml").phases]
    assert rows == phases, f"README.md's demo table lists {rows}; configs/demo.yaml has {phases}"
