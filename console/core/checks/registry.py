"""The check kinds by name, load-time validation of their arguments, and the runner.

Every check of a list runs, each in its own daemon thread (kubeadm's preflight does
the same): one that crashes or hangs (a stale NFS mount in statvfs) becomes a `fail`
result and never stops the others, nor keeps the console from exiting."""

from __future__ import annotations

import difflib
import threading
import time
from collections.abc import Iterable
from typing import Any

from console.core.checks import command, data, digest, disk, fresh, fs, gpu, jsonfile, net, patch, python
from console.core.checks import store as store_checks
from console.core.checks.context import CheckContext
from console.core.checks.kind import ArgError, Kind, Outcome
from console.core.checks.result import CheckResult, Status
from console.core.model.config import CheckSpec
from console.core.text.terminal_text import strip_format

_ALL: dict[str, Kind] = {k.name: k for fam in (fs, data, digest, jsonfile, disk, gpu, net, python, patch, fresh, command,
                                               store_checks)
                         for k in fam.KINDS}
KINDS: tuple[str, ...] = tuple(_ALL)


def kind(name: str) -> Kind | None:
    return _ALL.get(name)


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, KINDS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown check kind '{name}'; {hint}(known: {', '.join(KINDS)})"


def validate(kind_name: str, arg: Any) -> str | None:
    """One line saying what is wrong with a check's argument, or None when it is fine."""
    k = _ALL.get(kind_name)
    if k is None:
        return _unknown(kind_name)
    try:
        k.parse(arg)
    except ArgError as e:
        return str(e)
    return None


def default_name(kind_name: str, arg: Any) -> str:
    """'exists:/data/raw', 'free_space:…/data/out', 'port_free:30000', 'shm_free'."""
    k = _ALL.get(kind_name)
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
    k = _ALL.get(spec.kind)
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
    k = _ALL.get(spec.kind)
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
