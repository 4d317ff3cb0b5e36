"""Space: free_space (a disk a phase will write to) and shm_free (/dev/shm, where
extraction stages tensors). The need is a size or an expression over a phase's stats,
so "the disk fills at hour 5" is caught before hour 0."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.fs import nearest_existing
from console.core.checks.kind import Field, Kind, Outcome, names_check, short_path
from console.core.checks.sharing import device_of, others_line
from console.core.checks.values import ValueSourceError, named_values, values_budget
from console.core.figures.expr import ExprError, need_traced
from pipeline.sizes import format_bytes

SHM = "/dev/shm"


def free_bytes(path: Path) -> tuple[int, int]:
    """(free, total) bytes an unprivileged writer can use on the filesystem of `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _need(args: dict[str, Any], ctx: CheckContext, ev: dict[str, Any]) -> tuple[int | None, str | None]:
    """(need in bytes, None) or (None, why it cannot be computed); fills the evidence."""
    need = args["need"]
    ev["need"] = need
    try:
        names = named_values(args, ctx, ev)
    except ValueSourceError as e:
        return None, str(e)
    try:
        need_bytes, used = need_traced(need, names)
    except ExprError as e:
        return None, str(e)
    if used:
        ev["values"] = used
    ev["need_bytes"] = need_bytes
    return need_bytes, None


def _space(args: dict[str, Any], ctx: CheckContext, where: Path, walk_up: bool) -> Outcome:
    ev: dict[str, Any] = {"path": str(where)}
    need, why = _need(args, ctx, ev)
    if need is None:
        return Outcome(False, f"cannot compute the space needed on {where}: {why}", ev)
    checked = nearest_existing(where) if walk_up else (where if where.exists() else None)
    if checked is None:
        return Outcome(False, f"{where} does not exist", ev)
    if checked != where:
        ev["checked"] = str(checked)
    try:
        free, total = free_bytes(checked)
    except OSError as e:
        return Outcome(False, f"cannot read free space of {checked}: {e.strerror or e}", ev)
    ev.update(free_bytes=free, total_bytes=total)
    device = device_of(checked)
    others = ctx.sharing.space_on(device) if device is not None else []
    if others:
        ev["shared"] = [{"phase": c.phase, "bytes": c.bytes, "running": c.running} for c in others]
        need_all = need + sum(c.bytes for c in others)
    else:
        need_all = need
    on = f"{where}" if checked == where else f"{where} (on {checked})"
    shown = f"need {format_bytes(need)} on {on}{others_line(others, need)}"
    if free < need_all:
        return Outcome(False, f"{shown}, only {format_bytes(free)} free (short by {format_bytes(need_all - free)})", ev)
    return Outcome(True, f"{shown}, {format_bytes(free)} free", ev)


def run_free_space(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    return _space(args, ctx, ctx.resolve(args["path"]), walk_up=True)


def run_shm_free(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    return _space(args, ctx, ctx.resolve(args["path"]), walk_up=False)


KINDS = (
    Kind("free_space",
         {"path": Field("path", required=True), "need": Field("need", required=True),
          "values": Field("values")},
         run_free_space, lambda a: short_path(a["path"]),
         cross=lambda a: names_check([a["need"]], a.get("values")), budget=values_budget),
    Kind("shm_free",
         {"need": Field("need", required=True), "path": Field("path", default=SHM),
          "values": Field("values")},
         run_shm_free, lambda a: "" if a["path"] == SHM else short_path(a["path"]), scalar="need",
         cross=lambda a: names_check([a["need"]], a.get("values")), budget=values_budget),
)
