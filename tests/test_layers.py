"""The layering of docs/internals.md ("The console's layers"), enforced: a violation here is a console that starts
slowly (torch), a pipeline stage that cannot run alone, or a core that needs a terminal.

The contracts live in pyproject.toml ([tool.importlinter]) and `make test` runs
`lint-imports`; this test runs it too, so a pytest-only run catches a violation. It reads the
import graph, relative imports included (the AST scan it replaces missed `from ..ui import x`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_a_relative_import_across_layers_is_caught(tmp_path):
    for pkg in ("console", "pipeline"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "console" / "core" / "sneaky.py").write_text(
        '"""core reaching into the UI the way the old AST scan could not see."""\n'
        "from ..ui import render  # noqa: F401\n")
    (tmp_path / "pipeline" / "sneaky.py").write_text("def f():\n    import console.cli  # noqa: F401\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "console.core.sneaky -> console.ui.render" in done.stdout
    assert "pipeline.sneaky -> console.cli" in done.stdout
