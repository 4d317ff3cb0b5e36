"""No blank line between a block's header (`def f():`, `if x:`) and its first statement: what
hoisting a lazy import left behind. ruff holds the rest (D202 after a docstring, E303 past two
blank lines); no rule of it holds this one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def blank_after_header(source: str) -> list[int]:
    """The lines (1-based) of a blank line that opens a block's body."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef)):
            continue  # a blank line before a class's first method is the house style
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            first = body[0]
            top = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))]) - 1
            above = top - 1
            while above >= 0 and not lines[above].strip():
                above -= 1
            if above < top - 1 and lines[above].rstrip().endswith(":") and not lines[above].lstrip().startswith("#"):
                found.append(above + 2)
    return sorted(found)


def test_no_block_opens_with_a_blank_line() -> None:
    files = [p for folder in ("console", "pipeline", "bench", "tests") for p in (ROOT / folder).rglob("*.py")]
    found = {str(p.relative_to(ROOT)): lines for p in files if (lines := blank_after_header(p.read_text()))}
    assert not found, f"a blank line opens a block (delete it): {found}"


def test_a_blank_line_after_a_header_is_told_from_one_between_statements() -> None:
    source = ("def f() -> int:\n\n    x = 1\n\n    return x\n\n\n"
              "def g() -> None:\n    if True:\n\n        pass\n    else:\n        pass\n\n\n"
              "class C:\n\n    def m(self) -> None:\n        pass\n")
    assert blank_after_header(source) == [2, 10]
