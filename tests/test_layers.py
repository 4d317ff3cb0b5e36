"""The layering of docs/internals.md ("The console's layers", "The pipeline's floors"), enforced: a violation here
is a console or a stage that starts slowly (torch), a pipeline stage that cannot run alone, or a core that needs a
terminal.

The contracts live in pyproject.toml ([tool.importlinter]) and `make test` runs
`lint-imports`; this test runs it too, so a pytest-only run catches a violation. It reads the
import graph, relative imports included (the AST scan it replaces missed `from ..ui import x`)."""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
OURS = ("console", "pipeline")

# Files allowed to import our modules inside a function, each with its reason. Lazy imports of
# heavy third-party packages (pynvml) are not ours and are not listed.
DECLARED = {
    "console/cli/console.py": "Textual (console.ui.app, console.ui.serve) loads for the console command only",
    "console/launcher.py": "supervision (config, checks, notifier) loads once the phase has started, not before it",
}


def imports_in_functions(source: str) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement made inside a function of `source`."""
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (node for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom)))


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of each import of our own modules (absolute or relative) made inside a
    function of `source`."""
    found = []
    for node in imports_in_functions(source):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in OURS]
        elif node.level or (node.module or "").split(".")[0] in OURS:
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


def test_an_import_across_layers_a_circle_or_a_module_off_the_floors_is_caught(tmp_path):
    for pkg in ("console", "pipeline", "bench"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "results"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "console" / "core" / "sneaky.py").write_text(
        '"""core reaching into the UI the way the old AST scan could not see."""\n'
        "from ..ui import render  # noqa: F401\n")
    (tmp_path / "pipeline" / "sneaky.py").write_text("def f():\n    import console.cli  # noqa: F401\n")
    (tmp_path / "pipeline" / "chat" / "sneaky.py").write_text(
        '"""the chat floor reaching up to a stage, which the stage\'s own floor stands on."""\n'
        "from pipeline.merge import chunks  # noqa: F401\n")
    (tmp_path / "pipeline" / "merge" / "sneaky.py").write_text(
        '"""one stage reaching into another\'s module instead of a contract below both."""\n'
        "from pipeline.export import folder  # noqa: F401\n")
    (tmp_path / "console" / "core" / "checks" / "sneaky.py").write_text(
        '"""a check reaching up to the config loader, out of sight in a function."""\n'
        "def f():\n    from console.core.config import loader  # noqa: F401\n")
    (tmp_path / "console" / "core" / "stray.py").write_text('"""a module on no floor of the core."""\n')
    (tmp_path / "bench" / "sneaky.py").write_text(
        '"""a bench reaching into a stage\'s module instead of running its program."""\n'
        "from pipeline.train import loop  # noqa: F401\n")
    with (tmp_path / "console" / "core" / "lifecycle" / "state.py").open("a") as state:
        state.write("from console.core.lifecycle import project  # noqa: E402,F401 - closes a circle\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "console.core.sneaky -> console.ui.render" in done.stdout
    assert "pipeline.sneaky -> console.cli" in done.stdout
    assert "pipeline.chat.sneaky -> pipeline.merge.chunks" in done.stdout
    assert "pipeline.merge.sneaky -> pipeline.export.folder" in done.stdout
    assert "console.core.checks.sneaky -> console.core.config.loader" in done.stdout
    assert "bench.sneaky -> pipeline.train.loop" in done.stdout
    assert "No cycles are allowed in console.core.lifecycle" in done.stdout
    assert ".state -> .project" in done.stdout
    assert "not listed as layers" in done.stdout and "- console.core.stray\n" in done.stdout


def assert_only_declared(found: dict[str, list[tuple[int, str]]], declared: dict[str, str], name: str) -> None:
    hidden = {path: imports for path, imports in found.items() if path not in declared}
    assert hidden == {}, ("imports inside functions (move them to the top of the module; a cycle they "
                          "would close is broken by moving the shared piece down): " + repr(hidden))
    stale = sorted(set(declared) - set(found))
    assert stale == [], f"no such function-level import left in {stale}: remove them from {name}"


def test_our_modules_are_imported_at_module_level():
    assert_only_declared(function_level_imports_in(ROOT / "console"), DECLARED, "DECLARED")


HEAVY = ("torch", "transformers", "safetensors")
# pipeline/ files allowed other function-level imports of ours, each with its reason.
PIPELINE_DECLARED: dict[str, str] = {}


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _file_of(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _loaded_by(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules one import statement of `path` loads, relative forms resolved, each with
    the packages above it (whose __init__ runs first)."""
    if isinstance(node, ast.Import):
        named = [a.name for a in node.names]
    else:
        here = _module_of(path).split(".")
        base = here if path.name == "__init__.py" else here[:-1]
        module = node.module or ""
        if node.level:
            module = ".".join(base[:len(base) - node.level + 1] + ([module] if module else []))
        named = [module] + [f"{module}.{a.name}" for a in node.names if _file_of(f"{module}.{a.name}")]
    parts = [name.split(".") for name in named]
    return sorted({".".join(p[:i]) for p in parts for i in range(1, len(p) + 1)})


@functools.cache
def _module_level_imports(path: Path) -> tuple[str, ...]:
    """What importing `path` loads at once: its imports outside functions and TYPE_CHECKING
    (parsed once a file: loads_heavy walks the same modules from many importers)."""
    found: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.extend(_loaded_by(path, node))
            elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                continue
            elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    if isinstance(getattr(node, field, None), list):
                        visit(getattr(node, field))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return tuple(found)


def loads_heavy(module: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether importing `module` loads torch, transformers or safetensors, through any of our
    modules it imports at module level."""
    if module.split(".")[0] in HEAVY:
        return True
    path = _file_of(module) if module.split(".")[0] in OURS else None
    if path is None or module in seen:
        return False
    return any(loads_heavy(m, seen | {module}) for m in _module_level_imports(path))


def needless_lazy_imports(package: Path) -> dict[str, list[tuple[int, str]]]:
    """(line, module) of each function-level import of ours that buys no fast start: the module
    imported loads no heavy package, or the importing module loads one already."""
    out: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(package.rglob("*.py")):
        importer_heavy = loads_heavy(_module_of(path))
        for node in imports_in_functions(path.read_text(encoding="utf-8")):
            ours = [m for m in _loaded_by(path, node) if m.split(".")[0] in OURS]
            if ours and (importer_heavy or not any(loads_heavy(m) for m in ours)):
                out.setdefault(path.relative_to(ROOT).as_posix(), []).append((node.lineno, ours[-1]))
    return out


def test_pipeline_imports_its_modules_at_module_level_unless_that_would_load_torch():
    """A stage's --help and its refusals answer before torch loads (seconds on a busy box), so a
    function may import one of our modules that loads torch, transformers or safetensors, from a
    module that loads none; any other import of ours is at the top, where the graph shows it."""
    assert_only_declared(needless_lazy_imports(ROOT / "pipeline"), PIPELINE_DECLARED, "PIPELINE_DECLARED")


def test_a_needless_lazy_import_is_told_from_one_that_keeps_torch_out(tmp_path, monkeypatch):
    pkg = tmp_path / "pipeline"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "light.py").write_text("import json\n")
    (pkg / "heavy.py").write_text("from pipeline import light\nimport torch\n")
    (pkg / "stage.py").write_text("def f():\n    from pipeline import heavy\n\ndef g():\n    from . import light\n")
    (pkg / "deep.py").write_text("import torch\n\ndef f():\n    from .heavy import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert needless_lazy_imports(pkg) == {"pipeline/deep.py": [(4, "pipeline.heavy")],
                                          "pipeline/stage.py": [(5, "pipeline.light")]}


def test_a_function_level_import_of_ours_is_found_in_every_form():
    source = (
        "import json\n"
        "from console.core.text import errors\n"
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
             "console.core.lifecycle.notify", "console.core.runs.manager", "yaml"}
    assert loaded & heavy == set()
