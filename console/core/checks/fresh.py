"""fresh: a file is what the phase that produced it left behind (DVC-style). Catches a
dataset re-merged, or hand-edited, after extraction already read it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome, short_path
from console.core.records.provenance import compare, fingerprint, read_record


def _same(a: str | Path, b: str | Path) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def _listed(record: dict[str, Any], p: Path) -> tuple[str, dict[str, Any]] | None:
    for role in ("outputs", "inputs"):
        for path, fp in (record.get(role) or {}).items():
            if _same(path, p):
                return role[:-1], fp
    return None


def _producer(ctx: CheckContext, p: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The phase that declares `p` as an output (and its record), else any phase whose
    record lists it as an output (the config may have changed since)."""
    for ph in ctx.config.phases:
        if any(_same(ctx.resolve(o), p) for o in ph.outputs):
            return ph.id, read_record(ctx.config.state_dir, ph.id)
    for ph in ctx.config.phases:
        rec = read_record(ctx.config.state_dir, ph.id)
        if rec and any(_same(o, p) for o in (rec.get("outputs") or {})):
            return ph.id, rec
    return None, None


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def run_fresh(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p = ctx.resolve(args["path"])
    ev: dict[str, Any] = {"path": str(p)}
    phase_id = args.get("phase")
    if phase_id:
        known = [ph.id for ph in ctx.config.phases]
        if phase_id not in known:
            return Outcome(False, f"no phase '{phase_id}' in the config (phases: {', '.join(known)})", ev)
        record = read_record(ctx.config.state_dir, phase_id)
    else:
        phase_id, record = _producer(ctx, p)
        if phase_id is None:
            return Outcome(False, f"no phase lists {p} among its outputs: name the phase with phase:", ev)
    ev["phase"] = phase_id
    if record is None:
        return Outcome(False, f"no record: phase '{phase_id}' has not finished", ev)
    ev.update(run_id=record.get("run_id"), finished_at=record.get("finished_at"))
    listed = _listed(record, p)
    if listed is None:
        outs = ", ".join(short_path(o) for o in (record.get("outputs") or {})) or "none"
        return Outcome(False, f"phase '{phase_id}' did not record {p} (its outputs: {outs})", ev)
    role, old = listed
    now = fingerprint(p)
    ev.update(role=role, recorded=old, current=now)
    finished = record.get("finished_at")
    since = f"phase '{phase_id}' finished" + (f" at {_when(finished)}" if isinstance(finished, (int, float)) else "")
    why = compare(old, now)
    if why:
        ev["changed"] = why
        return Outcome(False, f"{p} changed since {since}: {why}", ev)
    return Outcome(True, f"{p} unchanged since {since}", ev)


KINDS = (
    Kind("fresh", {"path": Field("path", required=True), "phase": Field("text")},
         run_fresh, lambda a: short_path(a["path"]), scalar="path"),
)
