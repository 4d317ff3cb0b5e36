"""The check kinds by name, load-time validation of their arguments, and the runner.

Every check of a list runs, each in its own daemon thread (kubeadm's preflight does
the same): one that crashes or hangs (a stale NFS mount in statvfs) becomes a `fail`
result and never stops the others, nor keeps the console from exiting.

A family of kinds (fs.py, net.py, ...) is imported when a config first names one of its kinds:
a launcher, which reloads its config to verify a run, loads only the families that config uses
(all of them cost one whose config checks only `exists` and `command` 0.1 s of a core, a quarter
of its start)."""

from __future__ import annotations

import difflib
import threading
import time
from collections.abc import Iterable
from importlib import import_module
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import ArgError, Kind, Outcome
from console.core.checks.result import CheckResult, Status
from console.core.model.config import CheckSpec
from console.core.text.terminal_text import strip_format

# Each family module of console.core.checks with the kinds its KINDS declares, in the order
# the unknown-kind message lists them (tests/core/test_checks_registry.py holds the two equal).
FAMILIES: dict[str, tuple[str, ...]] = {
    "fs": ("exists", "absent", "contains", "lacks"),
    "data": ("jsonl_records",),
    "digest": ("sha256",),
    "jsonfile": ("json_matches",),
    "disk": ("free_space", "shm_free"),
    "gpu": ("gpu_free_memory", "gpus_idle"),
    "net": ("port_free", "http_ok"),
    "python": ("python_import",),
    "patch": ("patch_applied",),
    "fresh": ("fresh",),
    "command": ("command",),
    "store": ("store_intact",),
}
KINDS: tuple[str, ...] = tuple(name for names in FAMILIES.values() for name in names)
_FAMILY_OF = {name: family for family, names in FAMILIES.items() for name in names}
_ALL: dict[str, Kind] = {}  # the kinds of the families imported so far


def kind(name: str) -> Kind | None:
    """The kind called `name`, its family imported on first use; None for a name no family has."""
    found = _ALL.get(name)
    if found is None and name in _FAMILY_OF:
        for k in import_module(f"console.core.checks.{_FAMILY_OF[name]}").KINDS:
            _ALL.setdefault(k.name, k)
        found = _ALL.get(name)
    return found


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, KINDS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown check kind '{name}'; {hint}(known: {', '.join(KINDS)})"


def validate(kind_name: str, arg: Any) -> str | None:
    """One line saying what is wrong with a check's argument, or None when it is fine."""
    k = kind(kind_name)
    if k is None:
        return _unknown(kind_name)
    try:
        k.parse(arg)
    except ArgError as e:
        return str(e)
    return None


def default_name(kind_name: str, arg: Any) -> str:
    """'exists:/data/raw', 'free_space:…/data/out', 'port_free:30000', 'shm_free'."""
    k = kind(kind_name)
    if k is None:
        return kind_name
    try:
        label = k.label(k.parse(arg))
    except (ArgError, KeyError, TypeError, ValueError):
        raw = arg.get(k.scalar or "path") if isinstance(arg, dict) else arg
        label = str(raw) if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else ""
    return f"{kind_name}:{label}" if label else kind_name


def _result(spec: CheckSpec, ok: bool, message: str, evidence: dict[str, Any]) -> CheckResult:
    status: Status = "pass" if ok else ("warn" if spec.severity == "warning" else "fail")
    return CheckResult(name=spec.name, kind=spec.kind, severity=spec.severity, status=status,
                       message=strip_format(message), evidence=evidence)


def run_check(spec: CheckSpec, ctx: CheckContext) -> CheckResult:
    """One check, in this thread; an exception becomes a failing result."""
    k = kind(spec.kind)
    if k is None:
        return _result(spec, False, _unknown(spec.kind), {"kind": spec.kind})
    try:
        args = k.parse(spec.arg)
    except ArgError as e:
        return _result(spec, False, f"bad argument: {e}", {"arg": repr(spec.arg)})
    try:
        out: Outcome = k.run(args, ctx)
    except Exception as e:
        text = f"{type(e).__name__}: {e}"
        return _result(spec, False, f"check crashed: {text}", {"error": text})
    return _result(spec, out.ok, out.message, out.evidence)


def _deadline(spec: CheckSpec, timeout: float) -> float:
    """A kind with its own time limit (command, http_ok) gets at least that long."""
    k = kind(spec.kind)
    if k is None or k.budget is None:
        return timeout
    try:
        return max(timeout, float(k.budget(k.parse(spec.arg))))
    except (ArgError, KeyError, TypeError, ValueError):
        return timeout


def run_checks(specs: Iterable[CheckSpec], ctx: CheckContext, overrides: dict[str, str] | None = None,
               timeout: float = 30) -> list[CheckResult]:
    """Every check, concurrently; results in spec order. A failing check named in
    `overrides` is marked overridden with the operator's reason (journaling is the caller's)."""
    specs = list(specs)
    slots: list[CheckResult | None] = [None] * len(specs)
    threads: list[threading.Thread] = []

    def work(i: int, spec: CheckSpec) -> None:
        slots[i] = run_check(spec, ctx)

    for i, spec in enumerate(specs):
        t = threading.Thread(target=work, args=(i, spec), name=f"check-{spec.name}", daemon=True)
        t.start()
        threads.append(t)
    start = time.monotonic()
    for i, (spec, t) in enumerate(zip(specs, threads)):
        t.join(max(0.0, start + _deadline(spec, timeout) - time.monotonic()))
        if slots[i] is None:
            limit = _deadline(spec, timeout)
            slots[i] = _result(spec, False, f"check timed out after {limit:g} s (left running in the background)",
                               {"error": f"no result within {limit:g} s"})
    results = [r for r in slots if r is not None]
    for r in results:
        if r.status != "pass" and overrides and r.name in overrides:
            r.overridden = True
            r.reason = overrides[r.name]
    return results
