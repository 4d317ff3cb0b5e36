"""python_import: a module resolves (in this process, or in the interpreter the phase
will use) without being imported, so sglang and torch never load into the console."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from console.core.checks import modspec
from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome
from console.core.checks.subproc import run_bounded

LOCATE_TIMEOUT = 30.0


def interpreter(python: str, ctx: CheckContext) -> Path | None:
    """A `python:` setting as a path: relative paths against the config, bare names on PATH."""
    if "/" in python:
        p = ctx.resolve(python)
        return p if p.exists() else None
    found = shutil.which(python)
    return Path(found) if found else None


def find_module(module: str, python: str | None, ctx: CheckContext) -> dict[str, Any]:
    """modspec.locate's answer, from this process or from `python` in a subprocess."""
    if not python:
        return modspec.locate(module)
    exe = interpreter(python, ctx)
    if exe is None:
        return {"module": module, "found": False, "python": python,
                "error": f"interpreter {python} not found"}
    source = Path(modspec.__file__).read_text(encoding="utf-8")
    done = run_bounded([str(exe), "-c", source, module], ctx.root, LOCATE_TIMEOUT, env=ctx.env())
    base = {"module": module, "found": False, "python": str(exe)}
    if done.error:
        return {**base, "error": done.error}
    if done.timed_out:
        return {**base, "error": f"{exe} did not answer within {LOCATE_TIMEOUT:g} s"}
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if done.code != 0 or not isinstance(answer, dict):
        last = done.tail(1)
        return {**base, "error": f"{exe} exited {done.code}" + (f": {last[0]}" if last else "")}
    return answer


def package_dir(answer: dict[str, Any]) -> Path | None:
    """The folder of a located package (or the file's folder for a plain module)."""
    if answer.get("locations"):
        return Path(answer["locations"][0])
    if answer.get("origin"):
        return Path(answer["origin"]).parent
    return None


def run_python_import(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    module, python = args["module"], args.get("python") or ctx.python
    answer = find_module(module, python, ctx)
    who = answer.get("python") or python or "this interpreter"
    ev = {k: answer[k] for k in ("module", "python", "origin", "locations", "version", "error")
          if answer.get(k) is not None}
    if not answer.get("found"):
        if answer.get("sys_path"):
            ev["sys_path"] = answer["sys_path"]
        return Outcome(False, f"{module} cannot be imported by {who}: {answer.get('error')}", ev)
    where = answer.get("origin") or (answer.get("locations") or ["(namespace)"])[0]
    version = f" {answer['version']}" if answer.get("version") else ""
    return Outcome(True, f"{module}{version} resolves to {where}", ev)


KINDS = (
    Kind("python_import", {"module": Field("module", required=True), "python": Field("path")},
         run_python_import, lambda a: a["module"], scalar="module",
         budget=lambda a: LOCATE_TIMEOUT + 5 if a.get("python") else 0.0),
)
