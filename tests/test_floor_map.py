"""docs/internals.md's floor map of `pipeline/` names every module, and only modules that exist:
a module added without a place on a floor, or a map that still names a moved one, fails here,
so the map a newcomer reads is the house as it stands."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## The pipeline's floors"


def mapped_modules(doc: str) -> set[str]:
    """Paths under pipeline/ that the map's indented block names. A token with a `/` is a
    folder and the bare words after it are its modules (continuation lines too); a `.py`
    token is a module of pipeline/ itself; words before a line's first path are labels."""
    lines = doc[doc.index(HEADING):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    found: set[str] = set()
    folder: str | None = None
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        tokens = line.split()
        first = next((i for i, t in enumerate(tokens) if "/" in t or t.endswith(".py")), None)
        for token in tokens if first is None else tokens[first:]:
            if token.endswith("/"):
                folder = token
            elif token.endswith(".py"):
                found.add(token)
                folder = None
            elif folder is not None:
                found.add(f"{folder}{token}.py")
    return found


def modules_on_disk() -> set[str]:
    package = ROOT / "pipeline"
    return {p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "__init__.py"}


def test_the_floor_map_names_every_pipeline_module_and_no_other():
    mapped = mapped_modules((ROOT / "docs" / "internals.md").read_text(encoding="utf-8"))
    on_disk = modules_on_disk()
    assert sorted(on_disk - mapped) == [], "pipeline modules missing from docs/internals.md's floor map"
    assert sorted(mapped - on_disk) == [], "docs/internals.md's floor map names modules that do not exist"


def test_the_map_is_read_folder_by_folder():
    doc = (f"{HEADING}\n\nintro\n\n"
           "    2  stage   merge/    __main__ chunks\n"
           "                         output\n"
           "               regenerate/backends/  hf\n"
           "    1  ground  events.py  sizes.py\n"
           "\nafter the block: ignored.py\n")
    assert mapped_modules(doc) == {"merge/__main__.py", "merge/chunks.py", "merge/output.py",
                                   "regenerate/backends/hf.py", "events.py", "sizes.py"}


def test_the_ground_that_import_linter_keeps_low_is_the_map_s_ground():
    """A module added to pipeline/'s root is ground (every stage program is a package), so it
    must also join the contract that keeps the ground from importing the floors above it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    ground = next(c for c in contracts if c["name"].startswith("the pipeline's ground"))
    named = {m.removeprefix("pipeline.") for m in ground["source_modules"]}
    packages = {m for m in named if (ROOT / "pipeline" / m).is_dir()}  # a ground package: pipeline.records
    kept_low = {f"{m}.py" for m in named - packages}
    at_root = {m for m in modules_on_disk() if "/" not in m}
    assert sorted(at_root - kept_low) == [], "root modules the ground contract in pyproject.toml misses"
    assert sorted(kept_low - at_root) == [], "the ground contract names modules that do not exist"
