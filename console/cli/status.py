"""`eagle3 status`: every phase's state, last run, exit code and live progress, once or
refreshed in place (--watch). Exit 0 when no phase is failed (a lost run counts as failed) or
stale, 1 otherwise; with --watch, the last look's."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from console.cli.edge import EXIT_FAIL, EXIT_OK, UsageError
from console.cli.printing import fmt_duration, print_json
from console.core.lifecycle.livestats import LiveSnapshot, headline_metrics
from console.core.lifecycle.project import Project
from console.core.lifecycle.reread import ConfigChanged
from console.core.lifecycle.snapshot import Snapshot, SnapshotBuilder
from console.core.lifecycle.state import LIVE, State, glyph_of
from console.core.runs.deadline import Deadline, DeadlineError
from console.core.text.rates import format_rate
from console.core.text.terminal_text import one_line

HELP = ("every phase: state, last run, exit code, live progress; exit 0 when no phase is "
        "failed, lost or stale, 1 otherwise")


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--json", action="store_true", help="machine-readable, with each running phase's progress")
    c.add_argument("--checks", action="store_true", help="also run every phase's pre-flight checks")
    c.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                   help="refresh in place every SECONDS (default 2) until Ctrl-C")
    c.add_argument("--count", type=int, default=None, help=argparse.SUPPRESS)  # --watch: stop after N (tests)


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
    checks = {ph.id: project.check(ph.id, journal=False) for ph in project.config.phases} if args.checks else None
    builder = SnapshotBuilder(project)
    if args.watch is None:
        return _status_once(project, builder.build(checks), args, out)
    if args.watch <= 0 or args.watch > 3600:
        raise UsageError(f"--watch {args.watch:g}: seconds between 0 and 3600")
    clear = "\x1b[H\x1b[2J" if hasattr(out, "isatty") and out.isatty() else ""
    looks = 0
    code = EXIT_OK
    try:
        while args.count is None or looks < args.count:
            if looks:
                time.sleep(args.watch)
                _reread(project)
            snap = builder.build(checks)
            print(clear if clear else ("" if not looks else "\n"), end="", file=out)
            print(time.strftime("%Y-%m-%d %H:%M:%S") + f"  (every {args.watch:g}s, Ctrl-C to leave)", file=out)
            code = _status_once(project, snap, args, out)
            out.flush()
            looks += 1
    except KeyboardInterrupt:
        pass
    return code


def _reread(project: Project) -> None:
    """A long --watch shows what the files say now, as the console does."""
    try:
        project.reread()
    except ConfigChanged as e:
        print(f"eagle3: {e}; showing the values it had", file=sys.stderr)


def _status_once(project: Project, snap: Snapshot, args: argparse.Namespace, out: TextIO) -> int:
    bad = [s for s in snap.statuses if s.state in (State.FAILED, State.STALE)]
    code = EXIT_FAIL if bad else EXIT_OK
    try:
        due = project.deadline()
    except DeadlineError as e:
        print(f"eagle3: {e}", file=sys.stderr)
        due = None
    if args.json:
        print_json({"config": str(project.config.path), "name": project.config.name,
                    "state_dir": str(project.config.state_dir), "t": snap.t, "exit_code": code,
                    "saved_overrides": dict(project.config.saved_overrides),
                    "deadline": None if due is None else {**due.to_json(), "passed": due.passed(snap.t)},
                    "phases": snap.to_json()}, out)
        return code
    _print_table(project, snap, out)
    if due is not None:
        print(_deadline_line(due, snap.t), file=out)
    return code


def _deadline_line(due: Deadline, now: float) -> str:
    if due.passed(now):
        return f"deadline {due.clock()} has passed (eagle3 run --until off clears it)"
    return (f"deadline {due.clock()}, in {fmt_duration(due.left(now))}: the phases running then get the stop "
            f"`eagle3 stop` sends ({due.how})")


def _print_table(project: Project, snap: Snapshot, out: TextIO) -> None:
    statuses = snap.statuses
    idw = max(len(s.phase.id) for s in statuses)
    print(f"{project.config.name}  ({project.config.path})", file=out)
    saved = project.config.saved_overrides
    if saved:
        print(one_line("saved overrides: " + ", ".join(f"{k}={v}" for k, v in sorted(saved.items()))
                       + "  (eagle3 set)"), file=out)
    for pv in snap.phases:
        s = pv.status
        code_s = "" if s.exit_code is None else f"exit {s.exit_code}"
        run_id = s.run.run_id if s.run else "never run"
        line = (f"{glyph_of(s.state)} {s.phase.id.ljust(idw)}  {s.state:<9}  "
                f"{fmt_duration(s.duration_s):>7}  {code_s:<7}  {run_id}")
        if s.reason:
            line += f"  - {s.reason}"
        print(one_line(line), file=out)
        live = pv.live
        if s.state in LIVE and live is not None and live.done is not None:
            print(one_line("    " + progress_line(live) + ("  ⚠ stalled" if pv.stalled else "")), file=out)
        elif pv.stalled:
            print("    ⚠ stalled: no progress event and no log line", file=out)
        if pv.awaiting_first_unit:
            print(f"    working on its first unit: silent for {fmt_duration(pv.silent_s)}, its processes busy",
                  file=out)


def progress_line(live: LiveSnapshot) -> str:
    done = f"{live.done:,.0f}" + (f"/{live.total:,.0f}" if live.total else "") + f" {live.unit or ''}".rstrip()
    if live.failed:
        done += f", {live.failed:,.0f} failed"
    bits = [f"{100 * live.fraction:.1f}%" if live.fraction is not None else "", done,
            format_rate(live.rate, live.unit or "")]
    if live.eta_s is not None:
        bits.append(f"ETA {fmt_duration(live.eta_s)}")
    bits += [f.label for f in headline_metrics(live.metrics)[:3]]
    return "  ".join(b for b in bits if b)
