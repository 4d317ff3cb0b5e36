"""GPUs: gpu_free_memory (each listed GPU has room for the job) and gpus_idle (nobody
else is computing on them: a forgotten SGLang server is the usual culprit). Both read
one NVML poll through the context; with no driver they fail and say why."""

from __future__ import annotations

from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome, names_check
from console.core.checks.sharing import whose
from console.core.checks.values import ValueSourceError, named_values, values_budget
from console.core.figures.expr import ExprError, need_traced
from console.core.telemetry.samples import GpuSample
from pipeline.sizes import format_bytes


def _select(args: dict[str, Any], ctx: CheckContext) -> tuple[list[GpuSample] | None, Outcome | None]:
    reading = ctx.read_gpus()
    if reading.error:
        return None, Outcome(False, f"no GPU reading: {reading.error}", {"error": reading.error})
    if not reading.gpus:
        return None, Outcome(False, "no GPUs found by the driver", {"driver": reading.driver})
    by_index = {g.index: g for g in reading.gpus}
    wanted = args.get("gpus")
    if wanted in (None, "all"):
        return list(reading.gpus), None
    missing = [i for i in wanted if i not in by_index]
    if missing:
        have = ", ".join(str(i) for i in sorted(by_index))
        return None, Outcome(False, f"GPU {', '.join(map(str, missing))} not present (this host has GPU {have})",
                             {"missing": missing, "present": sorted(by_index)})
    return [by_index[i] for i in wanted], None


def _which(gpus: list[GpuSample]) -> str:
    idx = [g.index for g in gpus]
    if len(idx) > 2 and idx == list(range(idx[0], idx[0] + len(idx))):
        return f"GPUs {idx[0]}-{idx[-1]}"
    return ("GPU " if len(idx) == 1 else "GPUs ") + ", ".join(map(str, idx))


def run_gpu_free_memory(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    ev: dict[str, Any] = {"need": args["need"]}
    try:
        names = named_values(args, ctx, ev)
    except ValueSourceError as e:
        return Outcome(False, f"cannot compute the GPU memory needed: {e}", ev)
    try:
        need, used = need_traced(args["need"], names)
    except ExprError as e:
        return Outcome(False, f"cannot compute the GPU memory needed: {e}", ev)
    ev["need_bytes"] = need
    if used:
        ev["values"] = used
    reading = ctx.read_gpus()
    if reading.error or not reading.gpus:
        why = reading.error or "the driver" + (f" ({reading.driver})" if reading.driver else "") + " lists none"
        ev["gpus_visible"] = 0
        ev.update({k: v for k, v in (("error", reading.error), ("driver", reading.driver)) if v})
        return Outcome(False, f"need {format_bytes(need)} per GPU, but no GPU is visible: {why}", ev)
    gpus, failed = _select(args, ctx)
    if failed:
        failed.evidence.update(ev)
        return Outcome(False, f"need {format_bytes(need)} per GPU, but {failed.message}", failed.evidence)
    assert gpus is not None
    free: dict[str, int | None] = {}
    short: list[str] = []
    unknown: list[int] = []
    shared: dict[str, list[dict[str, Any]]] = {}
    for g in gpus:
        if g.memory_total is None or g.memory_used is None:
            free[str(g.index)] = None
            unknown.append(g.index)
            continue
        others = ctx.sharing.starting_on(g.index)
        taken = sum(c.bytes_of(g.memory_total) for c in others)
        f = g.memory_total - g.memory_used - taken
        free[str(g.index)] = f
        if others:
            shared[str(g.index)] = [{"phase": c.phase, "bytes": c.bytes_of(g.memory_total), "running": c.running}
                                    for c in others]
        if f < need:
            held = f" once {format_bytes(taken)} goes to {whose(others)}" if others else ""
            short.append(f"GPU {g.index} has {format_bytes(f)} free{held}")
    ev["free_bytes"] = free
    if shared:
        ev["shared"] = shared
    if short or unknown:
        parts = short + [f"GPU {i} memory N/A" for i in unknown]
        return Outcome(False, f"need {format_bytes(need)} per GPU: {'; '.join(parts)}", ev)
    least = min(gpus, key=lambda g: free[str(g.index)] or 0)
    return Outcome(True, f"{_which(gpus)}: each has {format_bytes(need)} free or more "
                         f"(least: GPU {least.index}, {format_bytes(free[str(least.index)] or 0)})", ev)


def run_gpus_idle(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    max_util = args["max_util"]
    max_mem = args.get("max_memory")
    ev: dict[str, Any] = {"max_util": max_util}
    if max_mem is not None:
        ev["max_memory_bytes"] = max_mem
    gpus, failed = _select(args, ctx)
    if failed:
        failed.evidence.update(ev)
        return failed
    assert gpus is not None
    busy: list[str] = []
    na: list[int] = []
    per: dict[str, Any] = {}
    for g in gpus:
        per[str(g.index)] = {"utilization": g.utilization, "memory_used": g.memory_used,
                             "pids": [p.pid for p in g.processes]}
        if getattr(g, "processes_unknown", False):
            per[str(g.index)]["pids"] = None
        why = []
        if g.processes:
            pids = ", ".join(str(p.pid) for p in g.processes[:4]) + ("…" if len(g.processes) > 4 else "")
            n = len(g.processes)
            why.append(f"{n} process{'es' if n != 1 else ''} (pid {pids})")
        blind = getattr(g, "processes_unknown", False)
        if g.utilization is None:
            na.append(g.index)
            if blind:
                why.append("cannot tell: its processes and utilization are N/A")
        elif g.utilization > max_util:
            why.append(f"{g.utilization:.0f}% busy")
        if max_mem is not None and g.memory_used is not None and g.memory_used > max_mem:
            why.append(f"{format_bytes(g.memory_used)} in use")
        if why:
            busy.append(f"GPU {g.index}: " + ", ".join(why))
    ev["gpus"] = per
    note = f" (utilization N/A on GPU {', '.join(map(str, na))})" if na else ""
    if busy:
        return Outcome(False, "not idle: " + "; ".join(busy) + note, ev)
    return Outcome(True, f"{_which(gpus)} idle: no processes, utilization at most {max_util:g}%{note}", ev)


def _gpus_label(a: dict[str, Any]) -> str:
    g = a.get("gpus")
    return "" if g in (None, "all") else ",".join(map(str, g))


KINDS = (
    Kind("gpu_free_memory",
         {"need": Field("need", required=True), "gpus": Field("gpus", default="all"),
          "values": Field("values")},
         run_gpu_free_memory, _gpus_label, scalar="need",
         cross=lambda a: names_check([a["need"]], a.get("values")), budget=values_budget),
    Kind("gpus_idle",
         {"gpus": Field("gpus", default="all"), "max_util": Field("number", default=10.0),
          "max_memory": Field("size")},
         run_gpus_idle, _gpus_label, scalar="gpus"),
)
