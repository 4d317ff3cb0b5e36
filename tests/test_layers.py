"""The layering of DESIGN.md section 1, enforced: a violation here is a console that starts
slowly (torch), a pipeline stage that cannot run alone, or a core that needs a terminal."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"torch", "sglang", "transformers", "safetensors", "tokenizers"}


def imports(pkg: str) -> list[tuple[str, str]]:
    """(module file, imported module) for every import statement anywhere in the package."""
    out = []
    for f in sorted((ROOT / pkg).rglob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out += [(str(f.relative_to(ROOT)), a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                out.append((str(f.relative_to(ROOT)), node.module))
    return out


def test_pipeline_never_imports_console():
    bad = [(f, m) for f, m in imports("pipeline") if m == "console" or m.startswith("console.")]
    assert not bad, bad


def test_console_imports_only_the_events_protocol_from_pipeline():
    bad = [(f, m) for f, m in imports("console")
           if (m == "pipeline" or m.startswith("pipeline.")) and m != "pipeline.events"]
    assert not bad, bad


def test_core_never_imports_the_ui():
    bad = [(f, m) for f, m in imports("console/core") if m.startswith("console.ui") or m.split(".")[0] == "textual"]
    assert not bad, bad


def test_console_never_imports_heavy_ml_packages():
    bad = [(f, m) for f, m in imports("console") if m.split(".")[0] in HEAVY]
    assert not bad, bad


def test_layering_scan_sees_the_code():
    assert len(imports("console")) > 20 and len(imports("pipeline")) > 5
