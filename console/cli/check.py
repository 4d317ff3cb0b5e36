"""`eagle3 check`: a phase's pre-flight checks, or every phase's; exit 1 when one blocks."""

from __future__ import annotations

import argparse
from typing import TextIO

from console.cli.edge import EXIT_FAIL, EXIT_OK
from console.cli.printing import print_json, print_results
from console.core.checks.result import CheckResult
from console.core.lifecycle.project import Project

HELP = "run a phase's pre-flight checks (all phases when none is named)"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("phase", nargs="?")
    c.add_argument("--json", action="store_true")


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
    phases = [project.config.phase(args.phase)] if args.phase else list(project.config.phases)
    report: dict[str, list[CheckResult]] = {}
    for ph in phases:
        report[ph.id] = project.check(ph.id)
    failed = any(r.blocking for rs in report.values() for r in rs)
    if args.json:
        print_json({"config": str(project.config.path), "passed": not failed,
                    "phases": {k: [r.to_json() for r in v] for k, v in report.items()}}, out)
    else:
        for pid, rs in report.items():
            print_results(pid, rs, out)
        print(summary(report), file=out)
    return EXIT_FAIL if failed else EXIT_OK


def summary(report: dict[str, list[CheckResult]]) -> str:
    """The one line a long listing ends with: how many checks, how they came out, and which
    phases can start now."""
    results = [r for rs in report.values() for r in rs]
    n, phases = len(results), len(report)
    where = f"{n} check{'' if n == 1 else 's'} in {phases} phase{'' if phases == 1 else 's'}"
    blocked = [pid for pid, rs in report.items() if any(r.blocking for r in rs)]
    if not blocked and all(r.status == "pass" for r in results):
        return f"all {where} pass"
    counts = {s: sum(1 for r in results if r.status == s) for s in ("pass", "warn", "fail")}
    ready = [pid for pid in report if pid not in blocked]
    line = f"{where}: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail"
    if not blocked:
        return f"{line}; every phase can start (warnings do not block)"
    can = f": {', '.join(ready)}" if ready else ""
    return f"{line} (✗ blocks the start); {len(ready)} of {phases} can start now{can}"
