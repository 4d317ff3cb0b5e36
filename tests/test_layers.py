"""The layering of docs/internals.md ("The console's layers"), enforced: a violation here is a console that starts
slowly (torch), a pipeline stage that cannot run alone, or a core that needs a terminal.

The contracts live in pyproject.toml ([tool.importlinter]) and `make test` runs
`lint-imports`; this test runs it too, so a pytest-only run catches a violation. It reads the
import graph, relative imports included (the AST scan it replaces missed `from ..ui import x`)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
OURS = ("console", "pipeline")

# Files allowed to import our modules inside a function, each with its reason. Lazy imports of
# heavy third-party packages (pynvml) are not ours and are not listed.
DECLARED = {
    "console/cli.py": "Textual (console.ui.app, console.ui.serve) loads for the console command only",
    "console/launcher.py": "supervision (config, checks, notifier) loads once the phase has started, not before it",
}


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of each import of our own modules (absolute or relative) made inside a
    function of `source`."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in OURS]
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in OURS):
                found.append((node.lineno, "." * node.level + (node.module or "")))
    return sorted(set(found))


def function_level_imports_in(package: Path) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        if found := function_level_imports(path.read_text(encoding="utf-8")):
            out[path.relative_to(package.parent).as_posix()] = found
    return out


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_an_import_across_layers_is_caught(tmp_path):
    for pkg in ("console", "pipeline"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "console" / "core" / "sneaky.py").write_text(
        '"""core reaching into the UI the way the old AST scan could not see."""\n'
        "from ..ui import render  # noqa: F401\n")
    (tmp_path / "pipeline" / "sneaky.py").write_text("def f():\n    import console.cli  # noqa: F401\n")
    (tmp_path / "pipeline" / "chat" / "sneaky.py").write_text(
        '"""the chat floor reaching up to a stage, which the stage\'s own floor stands on."""\n'
        "from pipeline.merge import chunks  # noqa: F401\n")
    (tmp_path / "console" / "core" / "checks" / "sneaky.py").write_text(
        '"""a check reaching up to the config loader, out of sight in a function."""\n'
        "def f():\n    from console.core.config import loader  # noqa: F401\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "console.core.sneaky -> console.ui.render" in done.stdout
    assert "pipeline.sneaky -> console.cli" in done.stdout
    assert "pipeline.chat.sneaky -> pipeline.merge.chunks" in done.stdout
    assert "console.core.checks.sneaky -> console.core.config.loader" in done.stdout


def test_our_modules_are_imported_at_module_level():
    found = function_level_imports_in(ROOT / "console")
    hidden = {path: imports for path, imports in found.items() if path not in DECLARED}
    assert hidden == {}, ("imports inside functions (move them to the top of the module; a cycle they "
                          "would close is broken by moving the shared piece down): " + repr(hidden))
    stale = sorted(set(DECLARED) - set(found))
    assert stale == [], f"no function-level import left in {stale}: remove them from DECLARED"


def test_a_function_level_import_of_ours_is_found_in_every_form():
    source = (
        "import json\n"
        "from console.core import errors\n"
        "def f():\n"
        "    import os\n"
        "    from ..ui import render\n"
        "    import console.cli, textwrap\n"
        "    class C:\n"
        "        def g(self):\n"
        "            from pipeline.events import ENV_VAR\n"
        "async def h():\n"
        "    from . import sibling\n"
    )
    assert function_level_imports(source) == [(5, "..ui"), (6, "console.cli"), (9, "pipeline.events"),
                                              (11, ".")]


def test_the_launcher_starts_a_phase_before_it_loads_the_config_checks_and_notifier():
    """A phase waits for what the launcher imports before starting it: only the run directory,
    the process table and the launcher's own output, never the config, checks or notifier."""
    probe = ("import sys, console.launcher\n"
             "print('\\n'.join(m for m in sys.modules if m.startswith(('console', 'pipeline', 'yaml'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "console.launcher" in loaded
    heavy = {"console.supervision", "console.core.config.loader", "console.core.checks.registry",
             "console.core.notify", "console.core.runs.manager", "yaml"}
    assert loaded & heavy == set()
