"""patch_applied, in two forms.

- `{patch: DIFF, root?|module?, python?, strip?}`: every hunk of a unified diff is present in
  the installed files (a team's own patch). Pure Python: each hunk's after-lines must appear
  contiguously in its target file; a hunk that is missing is told apart as "not applied"
  (its before-lines are there) or "the file differs from both".
- `{module: M, python?}` or `{file: F, python?}`: our SGLang dump patch, asked of
  `python -m pipeline.patch verify` (exit 0 only for the exact patched text of a supported
  SGLang version), run as a bounded subprocess by the interpreter of the check's `python`, else
  the phase's: the server environment's, which resolves the module to the SGLang it will serve
  with. The console never imports sglang or torch itself; the subprocess finds `pipeline`
  beside this console's package (PYTHONPATH), even in an environment that does not install it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome
from console.core.checks.python import find_module, interpreter, package_dir
from console.core.checks.subproc import run_bounded
from console.core.files.interpreter import interpreter_path

DEV_NULL = "/dev/null"
VERIFY_TIMEOUT = 30.0
VERIFIER_ERROR = "patch: error: "
VERIFY_STATES = ("patched", "original", "unknown")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchFormatError(ValueError):
    pass


@dataclass
class Hunk:
    header: str
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)


@dataclass
class FilePatch:
    old: str
    new: str
    hunks: list[Hunk] = field(default_factory=list)


def _header_path(rest: str) -> str:
    path = rest.split("\t", 1)[0].strip()
    if len(path) >= 2 and path[0] == path[-1] == '"':
        path = path[1:-1]
    return path


def parse_unified_diff(text: str) -> list[FilePatch]:
    """The file patches of a unified diff (git's extended headers are skipped)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln.removesuffix("\r") for ln in lines]
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FilePatch(_header_path(line[4:]), _header_path(lines[i + 1][4:])))
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if not files:
                raise PatchFormatError(f"line {i + 1}: a hunk before any ---/+++ file header")
            old_n = int(m.group(2)) if m.group(2) is not None else 1
            new_n = int(m.group(4)) if m.group(4) is not None else 1
            hunk = Hunk(m.group(0))
            i += 1
            while old_n > 0 or new_n > 0:
                if i >= len(lines):
                    raise PatchFormatError(f"the diff ends inside hunk {line!r}")
                body = lines[i]
                tag, content = (body[:1], body[1:]) if body else (" ", "")
                if tag == " ":
                    hunk.before.append(content)
                    hunk.after.append(content)
                    old_n -= 1
                    new_n -= 1
                elif tag == "-":
                    hunk.before.append(content)
                    old_n -= 1
                elif tag == "+":
                    hunk.after.append(content)
                    new_n -= 1
                elif tag != "\\":
                    raise PatchFormatError(f"line {i + 1}: {body[:60]!r} does not belong in hunk {line!r}")
                if old_n < 0 or new_n < 0:
                    raise PatchFormatError(f"line {i + 1}: hunk {line!r} has more lines than its header says")
                i += 1
            while i < len(lines) and lines[i].startswith("\\"):
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1
    return files


def strip_path(path: str, strip: int) -> str:
    parts = [p for p in path.split("/") if p]
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1] if parts else path


def _contains(lines: list[str], seq: list[str]) -> bool:
    n = len(seq)
    if n == 0:
        return True
    first = seq[0]
    return any(lines[start] == first and lines[start:start + n] == seq for start in range(len(lines) - n + 1))


def _hunk_state(lines: list[str], h: Hunk) -> str:
    """'applied', 'not applied' or 'differs'."""
    if h.after:
        if _contains(lines, h.after):
            return "applied"
    elif not _contains(lines, h.before):
        return "applied"  # a hunk that deletes everything it names
    return "not applied" if h.before and _contains(lines, h.before) else "differs"


def _root(args: dict[str, Any], ctx: CheckContext) -> tuple[Path | None, str | None, dict[str, Any]]:
    if args.get("root"):
        return ctx.resolve(args["root"]), None, {}
    if args.get("module"):
        answer = find_module(args["module"], args.get("python"), ctx)
        pkg = package_dir(answer) if answer.get("found") else None
        if pkg is None:
            who = answer.get("python") or "this interpreter"
            return None, f"cannot find module {args['module']} with {who}: {answer.get('error')}", answer
        return pkg.parent, None, {"module_origin": answer.get("origin"), "module_version": answer.get("version")}
    return ctx.root, None, {}


def run_patch_applied(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    patch_path = ctx.resolve(args["patch"])
    ev: dict[str, Any] = {"patch": str(patch_path)}
    try:
        text = patch_path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return Outcome(False, f"cannot read the patch {patch_path}: {e.strerror or e}", ev)
    try:
        files = parse_unified_diff(text)
    except PatchFormatError as e:
        return Outcome(False, f"{patch_path} is not a valid unified diff: {e}", ev)
    if not files:
        return Outcome(False, f"{patch_path} has no file changes (is it a unified diff?)", ev)
    root, why, extra = _root(args, ctx)
    ev.update({k: v for k, v in extra.items() if v is not None and k in ("module_origin", "module_version")})
    if root is None:
        return Outcome(False, why or "no root", ev)
    ev["root"] = str(root)
    strip = args["strip"] if args["strip"] is not None else 1
    total = sum(max(1, len(f.hunks)) for f in files)
    applied = 0
    checked: list[str] = []
    first: dict[str, Any] | None = None
    for fp in files:
        deleting = fp.new == DEV_NULL
        rel = strip_path(fp.old if deleting else fp.new, strip)
        target = root / rel
        checked.append(rel)
        if deleting:
            if target.exists():
                first = first or {"file": rel, "why": "not applied: the patch deletes it, and it still exists"}
            else:
                applied += 1
            continue
        try:
            lines = target.read_text(encoding="utf-8", errors="replace").split("\n")
        except FileNotFoundError:
            why = "not applied: the patch creates it" if fp.old == DEV_NULL else "the file does not exist"
            first = first or {"file": rel, "why": why}
            continue
        except OSError as e:
            first = first or {"file": rel, "why": f"cannot read it: {e.strerror or e}"}
            continue
        lines = [ln.removesuffix("\r") for ln in lines]
        if lines and lines[-1] == "":
            lines.pop()
        if not fp.hunks:
            applied += 1
            continue
        for n, h in enumerate(fp.hunks, start=1):
            state = _hunk_state(lines, h)
            if state == "applied":
                applied += 1
            elif first is None:
                why = ("not applied: its original lines are still there" if state == "not applied"
                       else "the file differs from both the patch's original and patched lines")
                first = {"file": rel, "hunk": n, "hunks_in_file": len(fp.hunks), "header": h.header, "why": why}
    ev.update(files=checked, hunks_applied=applied, hunks_total=total)
    if first is not None:
        ev["first_failure"] = first
        where = first["file"]
        if "hunk" in first:
            where += f" hunk {first['hunk']}/{first['hunks_in_file']} ({first['header']})"
        return Outcome(False, f"{where}: {first['why']}; {applied}/{total} hunks applied", ev)
    nfiles = len(checked)
    return Outcome(True, f"{patch_path.name}: all {total} hunks applied in {nfiles} "
                         f"file{'s' if nfiles != 1 else ''} under {root}", ev)


def _pipeline_root() -> Path | None:
    """The folder holding the `pipeline` package shipped with this console (the checkout, or
    site-packages), so another interpreter can run `-m pipeline.patch` without installing it."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pipeline" / "patch" / "__main__.py").is_file() else None


def run_patch_verify(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    if args.get("python"):
        exe = interpreter(args["python"], ctx)
        if exe is None:
            return Outcome(False, f"interpreter {args['python']} not found", {"python": args["python"]})
        python = str(exe)
    else:
        python = interpreter_path(ctx.python)
    where = ["--module", args["module"]] if args.get("module") else ["--file", str(ctx.resolve(args["file"]))]
    argv = [python, "-m", "pipeline.patch", "verify", *where]
    env = ctx.env()
    root = _pipeline_root()
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    ev: dict[str, Any] = {"argv": argv}
    done = run_bounded(argv, ctx.root, VERIFY_TIMEOUT, env=env)
    if done.error:
        return Outcome(False, f"cannot run the patch verifier: {done.error}", ev)
    if done.timed_out:
        return Outcome(False, f"{python} -m pipeline.patch verify did not answer within {VERIFY_TIMEOUT:g} s", ev)
    out = done.stdout.strip().splitlines()
    line = out[-1] if out else ""
    state = line.split(" ", 1)[0] if line else ""
    ev.update(exit=done.code, state=state if state in VERIFY_STATES else None)
    if done.code == 0 and state == "patched":
        return Outcome(True, line, ev)
    target = " ".join(where)
    if done.code == 1 and state == "original":
        return Outcome(False, f"not applied: {line}; run python -m pipeline.patch apply {target}", ev)
    if done.code == 1 and state == "unknown":
        return Outcome(False, line, ev)
    tail = done.tail(1)
    why = tail[0] if tail else f"exit {done.code}"
    if why.startswith(VERIFIER_ERROR):  # the verifier's own one-line reason, as the stage edge words it
        return Outcome(False, why.removeprefix(VERIFIER_ERROR), ev)
    return Outcome(False, f"{python} -m pipeline.patch verify {target} failed (exit {done.code}): {why}", ev)


def run_patch(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    return run_patch_applied(args, ctx) if args.get("patch") else run_patch_verify(args, ctx)


def _cross(a: dict[str, Any]) -> str | None:
    if not a.get("patch"):
        if a.get("root") or a.get("strip") is not None:
            return f"{'root' if a.get('root') else 'strip'} is used only with patch (a unified diff)"
        if bool(a.get("module")) == bool(a.get("file")):
            return ("give patch (a unified diff to look for), or one of module or file "
                    "(checked by python -m pipeline.patch verify)")
        return None
    if a.get("file"):
        return "file is for the form without patch: {file: F} asks python -m pipeline.patch verify"
    if a.get("root") and a.get("module"):
        return "give root or module, not both"
    if a.get("python") and not a.get("module"):
        return "python is used only with module (the interpreter that finds it)"
    return None


def _label(a: dict[str, Any]) -> str:
    if a.get("patch"):
        return Path(a["patch"]).name
    return a.get("module") or Path(a["file"]).name


def _budget(a: dict[str, Any]) -> float:
    if a.get("patch"):
        return 35.0 if a.get("python") else 0.0
    return VERIFY_TIMEOUT + 5


KINDS = (
    Kind("patch_applied",
         {"patch": Field("path"), "root": Field("path"), "module": Field("module"), "file": Field("path"),
          "python": Field("path"), "strip": Field("count")},
         run_patch, _label, scalar="patch", cross=_cross, budget=_budget),
)
