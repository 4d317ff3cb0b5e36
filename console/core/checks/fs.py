"""Files and folders: exists, absent, contains, lacks."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome, short_path
from console.core.telemetry.disk import nearest_existing  # one definition: the disk panel's too
from pipeline.sizes import format_bytes

WALK_LIMIT = 100_000
LINE_LIMIT = 300


def describe(p: Path) -> tuple[str, dict[str, Any]]:
    """'directory, 12 files, 3.4 GB' and the same as evidence; folders are walked up to
    WALK_LIMIT entries so a store of a million files answers quickly."""
    if p.is_dir():
        files = 0
        total = 0
        capped = False
        for dirpath, _dirs, names in os.walk(p):
            for name in names:
                files += 1
                try:
                    total += os.stat(os.path.join(dirpath, name)).st_size
                except OSError:
                    pass
                if files >= WALK_LIMIT:
                    capped = True
                    break
            if capped:
                break
        count = f"{files}+" if capped else str(files)
        ev = {"type": "directory", "files": files, "bytes": total}
        if capped:
            ev["counted_up_to"] = WALK_LIMIT
        plural = "" if files == 1 else "s"
        return f"directory, {count} file{plural}, {format_bytes(total)}", ev
    st = p.stat()
    return f"file, {format_bytes(st.st_size)}", {"type": "file", "bytes": st.st_size}


def _missing(p: Path) -> tuple[str, dict[str, Any]]:
    ev: dict[str, Any] = {"path": str(p)}
    if p.is_symlink():
        target = os.readlink(p)
        ev["broken_symlink_to"] = target
        return f"{p} is a broken symlink (to {target})", ev
    parent = nearest_existing(p.parent)
    if parent is not None and parent != p.parent:
        ev["nearest_existing"] = str(parent)
        return f"{p} does not exist (nor does its folder; nearest existing: {parent})", ev
    return f"{p} does not exist", ev


def run_exists(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p = ctx.resolve(args["path"])
    if not p.exists():
        msg, ev = _missing(p)
        return Outcome(False, msg, ev)
    what, ev = describe(p)
    return Outcome(True, f"{p} exists ({what})", {"path": str(p), **ev})


def run_absent(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p = ctx.resolve(args["path"])
    if not p.exists() and not p.is_symlink():
        return Outcome(True, f"{p} is absent", {"path": str(p)})
    if not p.exists():
        return Outcome(False, f"{p} exists as a broken symlink: remove it first",
                       {"path": str(p), "broken_symlink_to": os.readlink(p)})
    what, ev = describe(p)
    return Outcome(False, f"{p} still exists ({what}): remove it first", {"path": str(p), **ev})


def _search(args: dict[str, Any], ctx: CheckContext) -> tuple[Path, re.Match[str] | None, str, Outcome | None]:
    p = ctx.resolve(args["path"])
    pattern = args["pattern"]
    if p.is_dir():
        return p, None, "", Outcome(False, f"{p} is a folder; {args['_kind']} reads one file",
                                    {"path": str(p), "pattern": pattern})
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        msg, ev = _missing(p)
        return p, None, "", Outcome(False, msg, {**ev, "pattern": pattern})
    except OSError as e:
        return p, None, "", Outcome(False, f"cannot read {p}: {e.strerror or e}",
                                    {"path": str(p), "pattern": pattern})
    return p, re.search(pattern, text, re.MULTILINE), text, None


def _where(text: str, m: re.Match[str]) -> tuple[int, str]:
    line_no = text.count("\n", 0, m.start()) + 1
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.start())
    line = text[start:end if end >= 0 else len(text)].rstrip("\r")
    if len(line) > LINE_LIMIT:
        line = line[:LINE_LIMIT] + "…"
    return line_no, line


def run_contains(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p, m, text, failed = _search({**args, "_kind": "contains"}, ctx)
    if failed:
        return failed
    pattern = args["pattern"]
    if m is None:
        lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        return Outcome(False, f"/{pattern}/ not found in {p} ({lines} lines)",
                       {"path": str(p), "pattern": pattern, "lines": lines})
    line_no, line = _where(text, m)
    return Outcome(True, f"{p}:{line_no} matches /{pattern}/: {line.strip()}",
                   {"path": str(p), "pattern": pattern, "line_number": line_no, "line": line,
                    "match": m.group(0)[:LINE_LIMIT]})


def run_lacks(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p, m, text, failed = _search({**args, "_kind": "lacks"}, ctx)
    if failed:
        return failed
    pattern = args["pattern"]
    if m is None:
        return Outcome(True, f"{p} has no match for /{pattern}/", {"path": str(p), "pattern": pattern})
    line_no, line = _where(text, m)
    return Outcome(False, f"{p}:{line_no} still matches /{pattern}/: {line.strip()}",
                   {"path": str(p), "pattern": pattern, "line_number": line_no, "line": line,
                    "match": m.group(0)[:LINE_LIMIT]})


def _pattern_label(a: dict[str, Any]) -> str:
    pat = a["pattern"]
    pat = pat if len(pat) <= 24 else pat[:23] + "…"
    return f"{Path(a['path']).name}:{pat}"


_PATH = {"path": Field("path", required=True)}
_SEARCH = {"path": Field("path", required=True), "pattern": Field("regex", required=True)}

KINDS = (
    Kind("exists", _PATH, run_exists, lambda a: short_path(a["path"]), scalar="path"),
    Kind("absent", _PATH, run_absent, lambda a: short_path(a["path"]), scalar="path"),
    Kind("contains", _SEARCH, run_contains, _pattern_label),
    Kind("lacks", _SEARCH, run_lacks, _pattern_label),
)
