"""What more than one command prints the same way: check results, a JSON document, a
duration, and the note about a `--set` path that reads differently from the shell's folder."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from console.core.checks.result import CHECK_GLYPHS, CheckResult
from console.core.files.setpaths import misread_paths
from console.core.text.durations import format_duration
from console.core.text.terminal_text import one_line


def print_results(phase_id: str, results: list[CheckResult], out: TextIO) -> None:
    print(f"{phase_id}:", file=out)
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        mark = CHECK_GLYPHS.get(r.status, "?")
        suffix = f"  [overridden: {r.reason}]" if r.overridden else ""
        print(one_line(f"  {mark} {r.name.ljust(width)}  {r.message}{suffix}"), file=out)


def print_json(obj: Any, out: TextIO) -> None:
    """The whole document or nothing: rendered first (anything not JSON by its str()), then
    written, so a script never reads half a report."""
    out.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_json_array(items: Iterable[Any], out: TextIO) -> None:
    """A JSON array written item by item as `items` yields them, the same text `print_json`
    gives the whole list: a long listing is never held in memory. A listing cut short (a
    closed pipe) is invalid JSON, never a shorter valid one."""
    encode = json.JSONEncoder(indent=2, default=str).encode
    out.write("[")
    sep = "\n  "
    for item in items:
        out.write(sep + encode(item).replace("\n", "\n  "))
        sep = ",\n  "
    out.write("]\n" if sep == "\n  " else "\n]\n")


def fmt_duration(s: float | None) -> str:
    return format_duration(s, unknown="-")


def note_misread_paths(root: Path, values: Mapping[str, str], flag: str) -> None:
    for line in misread_paths(root, values, Path.cwd(), flag):
        print(f"eagle3: note: {line}", file=sys.stderr)
