"""store_intact: a hidden-state store is whole, asked of the pipeline itself.

    verify:
      - store_intact: {path: STORE, model: TARGET, sample: 64, timeout: 600}

It runs `python -m pipeline.extract --verify --out STORE --json [--model TARGET]
[--sample N]` as a bounded subprocess, with the interpreter the phase's `python:` names
(else the console's), and reads its JSON report. The pipeline confirms: the manifest lists
every sample of the run (meta.json's records), each file has its manifest size, the xxh3
checksums of `sample` random samples and the last `sample` written match (`sample: 0`:
every file), and with `model` the target's weight fingerprint is meta.json's. The console
imports neither the pipeline (beyond pipeline.events) nor torch: the verifier itself needs
no torch either, so it answers in about a second plus the checksum reads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome, short_path
from console.core.checks.subproc import run_bounded
from console.core.files.interpreter import interpreter_path

SHOWN_PROBLEMS = 5
REPORT_KEYS = ("expected", "samples", "tokens", "bytes", "sizes_checked", "checksums_checked",
               "target_fingerprint", "model_fingerprint", "problem_count")


def _pipeline_root() -> Path | None:
    """The folder holding the `pipeline` package beside this console, put on PYTHONPATH so
    an interpreter that does not install it still runs `-m pipeline.extract`."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pipeline" / "extract" / "__main__.py").is_file() else None


def verify_argv(args: dict[str, Any], ctx: CheckContext) -> list[str]:
    argv = [interpreter_path(ctx.python), "-m", "pipeline.extract", "--verify", "--json",
            "--out", str(ctx.resolve(args["path"]))]
    if args["model"]:
        argv += ["--model", str(ctx.resolve(args["model"]))]
    if args["sample"]:
        argv += ["--sample", str(args["sample"])]
    return argv


def _report(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "ok" in obj and isinstance(obj.get("problems"), list):
            return obj
    return None


def run_store_intact(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    store = ctx.resolve(args["path"])
    argv = verify_argv(args, ctx)
    env = ctx.env()
    root = _pipeline_root()
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    ev: dict[str, Any] = {"store": str(store), "argv": argv}
    done = run_bounded(argv, ctx.root, args["timeout"], env=env)
    if done.error:
        return Outcome(False, f"cannot run the store verifier: {done.error}", ev)
    if done.timed_out:
        return Outcome(False, f"verifying {store} took over {args['timeout']:g} s (killed); raise timeout: "
                              "or lower sample:", ev)
    ev["exit_code"] = done.code
    report = _report(done.stdout)
    if report is None:
        tail = done.tail(1)
        why = tail[0] if tail else "no output"
        return Outcome(False, f"store verifier exited {done.code} without a report: {why}", ev)
    ev.update({k: report.get(k) for k in REPORT_KEYS})
    problems = [str(p) for p in report["problems"]]
    ev["problems"] = problems[:SHOWN_PROBLEMS]
    summary = (f"{report.get('samples')}/{report.get('expected')} samples, {report.get('sizes_checked')} sizes and "
               f"{report.get('checksums_checked')} checksums checked")
    if report.get("ok") is True and done.code == 0:
        target = ", target weights match" if report.get("model_fingerprint") else ""
        return Outcome(True, f"{store} intact: {summary}{target}", ev)
    count = report.get("problem_count") or len(problems)
    first = problems[0] if problems else f"exit {done.code}"
    more = f" (+{count - 1} more)" if count and count > 1 else ""
    return Outcome(False, f"{first}{more}; {summary}", ev)


KINDS = (
    Kind("store_intact",
         {"path": Field("path", required=True), "model": Field("path"), "sample": Field("count", default=64),
          "timeout": Field("timeout", default=600.0)},
         run_store_intact, lambda a: short_path(a["path"]), scalar="path", budget=lambda a: a["timeout"] + 5),
)
