"""`eagle3 journal`: the append-only record of runs, checks, overrides and stops, one line
each or as JSON."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any, TextIO

from console.cli.edge import EXIT_OK
from console.cli.printing import fmt_duration, print_json_array
from console.core.lifecycle.project import Project
from console.core.lifecycle.state import signal_name
from console.core.records.journal import Scan
from console.core.text.terminal_text import one_line

HELP = "the append-only record of runs, checks, overrides and stops"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--json", action="store_true")
    c.add_argument("--phase")
    c.add_argument("-n", "--limit", type=_records, metavar="N", help="the last N records")


def _records(text: str) -> int:
    """-n's value: a whole number of records, 0 or more (a negative one printed nothing, exit 0)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of records") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is fewer than 0 records; -n N prints the last N")
    return n


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
    """Printed as it is read: a journal of any size costs a block and a line of memory."""
    if args.phase:
        project.config.phase(args.phase)
    counts = Scan()
    records = project.journal.stream(phase=args.phase, limit=args.limit, counts=counts)
    if args.json:
        print_json_array(records, out)
    else:
        for r in records:
            print(format_journal_record(r), file=out)
    if counts.skipped:
        print(f"eagle3: skipped {counts.skipped} line(s) of {project.journal.path} that are not journal records "
              "(torn, or fields of the wrong type)", file=sys.stderr)
    return EXIT_OK


def format_journal_record(r: dict[str, Any]) -> str:
    t = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("t", 0)))
    ev = r.get("event", "?")
    phase = r.get("phase", "")
    return one_line(f"{t}  {r.get('user', '?'):<10} {ev:<12} {phase:<14} {_detail(ev, r)}".rstrip())


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _detail(ev: str, r: dict[str, Any]) -> str:
    if ev == "override":
        return f"check {r.get('check')} overridden: {r.get('reason')}"
    if ev == "run_started":
        return f"run {r.get('run_id')}"
    if ev == "run_ended":
        took = fmt_duration(r.get("duration_s"))
        if r.get("stopped") and isinstance(r.get("deadline"), (int, float)):
            how = "killed" if r.get("signal") == signal.SIGKILL else "stopped"
            return f"run {r.get('run_id')} {how} at the deadline ({_clock(r['deadline'])}) after {took}"
        if r.get("stopped"):
            return f"run {r.get('run_id')} stopped after {took}"
        if r.get("code") is None:
            why = r.get("error") or f"killed by {signal_name(r.get('signal'))}"
            return f"run {r.get('run_id')} ended after {took}: {why}"
        return f"run {r.get('run_id')} exit {r.get('code')} in {took}, verify {r.get('verify')}"
    if ev in ("checks", "verify"):
        res = r.get("results") or []
        bad = [x["name"] for x in res if x.get("status") == "fail" and not x.get("overridden")]
        return "pass" if not bad else "fail: " + ", ".join(bad)
    if ev == "stop":
        return f"run {r.get('run_id', '')}" + (f": {r['reason']}" if r.get("reason") else "")
    if ev == "deadline" and isinstance(r.get("at"), (int, float)):
        return f"deadline {_clock(r['at'])}, grace {r.get('grace')}s ({r.get('how')})"
    if ev == "deadline_cleared":
        return "deadline cleared"
    if ev == "confirm":
        return "confirmed by typing the phase id"
    if ev == "overrides_saved":
        bits = [f"{k}={v}" for k, v in sorted((r.get("set") or {}).items())]
        bits += [f"cleared {k}" for k in r.get("cleared") or []]
        return "saved overrides: " + ", ".join(bits)
    return ""
