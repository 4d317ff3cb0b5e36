"""`eagle3`: the console's command line. Every command takes the config first, shares the
core with the TUI, and ends with an exit code a script can trust: 0 ok, 1 a check or a
phase failed, 2 the config or the arguments are wrong. No traceback reaches the operator."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from console.core.checks.result import CHECK_GLYPHS
from console.core.checks.subproc import kill_live
from console.core.config.loader import load_config
from console.core.config.model import UnknownPhase
from console.core.config.overlay import overlay_lock, overlay_path, read_saved, write_saved
from console.core.leaves.durations import format_duration
from console.core.leaves.errors import ConfigError, Eagle3Error
from console.core.lifecycle.livestats import headline_metrics
from console.core.lifecycle.project import Project, override_hint
from console.core.leaves.rates import format_rate
from console.core.lifecycle.reread import ConfigChanged
from console.core.leaves.setpaths import misread_paths
from console.core.flow.runall import AllDone, Attaching, Entering, Halted, Skipped, run_all, unknown_overrides
from console.core.lifecycle.snapshot import SnapshotBuilder
from console.core.flow.startflow import (
    AlreadyLive,
    BlockedStart,
    ConfirmationNeeded,
    Refused,
    RerunNeeded,
    Started,
    StartRequest,
    StartResult,
    drive,
)
from console.core.lifecycle.state import LIVE, State, glyph_of, signal_name
from console.core.leaves.terminal_text import one_line
from console.core.flow.waiting import Waited, copy_log, follow, wait

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Eagle3Error):
    pass


class Signalled(Exception):
    """SIGTERM or SIGHUP on a command line, raised where the main thread is, like Ctrl-C's
    KeyboardInterrupt, so that the same cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum: int, _frame: Any) -> None:
    raise Signalled(signum)


def _kill_checks() -> None:
    """The check commands still running: they are in sessions of their own, which the
    terminal's signals never reach."""
    kill_live()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sub = self.prog.removeprefix("eagle3").strip()
        raise UsageError(f"{sub + ': ' if sub else ''}{message} (see {self.prog} --help)")


def _parse_sets(values: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or ():
        name, eq, value = v.partition("=")
        if not eq or not name:
            raise UsageError(f"--set {v}: expected VAR=VALUE")
        out[name.strip()] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="eagle3", description="Operator console for EAGLE-3 drafter pipelines.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_, description=help_)
        c.add_argument("config", help="pipeline YAML (e.g. configs/demo.yaml)")
        c.add_argument("--set", action="append", metavar="VAR=VALUE", default=[],
                       help="override a config variable (repeatable)")
        if name != "set":
            c.add_argument("--save", action="store_true",
                           help="also remember the --set values for every later command (eagle3 set)")
        return c

    c = command("console", "open the operator console (TUI)")
    c.add_argument("--theme", help="theme name (eagle3-dark, eagle3-light, eagle3-ansi, or any Textual theme)")
    c.add_argument("--no-mouse", action="store_true", help="keyboard only; leave the mouse to tmux")
    c.add_argument("--serve", metavar="[HOST:]PORT",
                   help="serve the console to a browser (textual-serve); HOST defaults to 127.0.0.1")
    c.add_argument("--serve-actions", action="store_true",
                   help="with --serve: allow run, stop, check and verify (read-only otherwise)")
    c.add_argument("--serve-sessions", type=int, default=None, metavar="N",
                   help="with --serve: at most N browser sessions at once (default 2, at most 16)")
    c.add_argument("--read-only", action="store_true", help=argparse.SUPPRESS)  # what --serve runs

    c = command("check", "run a phase's pre-flight checks (all phases when none is named)")
    c.add_argument("phase", nargs="?")
    c.add_argument("--json", action="store_true")

    c = command("run", "start a phase (or --all, in order) after its checks pass")
    c.add_argument("phase", nargs="?")
    c.add_argument("--all", action="store_true", help="walk every phase in order: check, run, wait, verify, next")
    c.add_argument("--override", action="append", default=[], metavar="CHECK",
                   help="override a failing check for this run (needs --reason)")
    c.add_argument("--reason", help="why the override is safe; recorded in the journal")
    c.add_argument("--wait", action="store_true", help="stream the log and wait for the phase to end")
    c.add_argument("--rerun", action="store_true",
                   help="run a phase that is done again (asked on a terminal; needed without one)")
    c.add_argument("--confirm", metavar="PHASE_ID", action="append", default=[],
                   help="confirm a `confirm: true` phase without a prompt (type its id)")
    c.add_argument("--timeout", type=float, default=600.0,
                   help="with --all: seconds to wait for a service to become ready (default 600)")

    c = command("status", "every phase: state, last run, exit code, live progress; exit 0 when no phase is "
                          "failed, lost or stale, 1 otherwise")
    c.add_argument("--json", action="store_true", help="machine-readable, with each running phase's progress")
    c.add_argument("--checks", action="store_true", help="also run every phase's pre-flight checks")
    c.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                   help="refresh in place every SECONDS (default 2) until Ctrl-C")
    c.add_argument("--count", type=int, default=None, help=argparse.SUPPRESS)  # --watch: stop after N (tests)

    c = command("logs", "print a phase's latest log")
    c.add_argument("phase")
    c.add_argument("-f", "--follow", action="store_true", help="follow until the phase ends")

    c = command("stop", "stop a running phase (SIGTERM to its process group, then SIGKILL)")
    c.add_argument("phase")
    c.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")

    c = command("set", "remember variable overrides for this config: every command (the console too) applies "
                       "them under --set; with no VAR=VALUE, list them")
    c.add_argument("assignments", nargs="*", metavar="VAR=VALUE")
    c.add_argument("--clear", action="append", default=[], metavar="VAR", help="forget one (repeatable)")

    c = command("journal", "the append-only record of runs, checks, overrides and stops")
    c.add_argument("--json", action="store_true")
    c.add_argument("--phase")
    c.add_argument("-n", "--limit", type=int)
    return p


# The optional positionals a command takes anywhere among its options: argparse fills one
# with nothing when it meets the config, so a phase typed after `--set X=Y` came back as an
# unrecognized argument.
TRAILING = {"check": "phase", "run": "phase", "set": "assignments"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    dest = TRAILING.get(args.command)
    if dest is not None:
        loose = [x for x in extra if not x.startswith("-")]
        current = getattr(args, dest)
        if isinstance(current, list):
            setattr(args, dest, current + loose)
            extra = [x for x in extra if x not in loose]
        elif current is None and loose:
            setattr(args, dest, loose[0])
            extra.remove(loose[0])
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    out = sys.stdout
    try:
        args = parse_args(argv)
        return _dispatch(args, out)
    except ConfigError as e:
        print(f"eagle3: {e}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as e:
        print(f"eagle3: {e}", file=sys.stderr)
        return EXIT_USAGE
    except UnknownPhase as e:
        print(f"eagle3: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Eagle3Error as e:
        print(f"eagle3: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        _kill_checks()
        print("\neagle3: interrupted", file=sys.stderr)
        return 130
    except Signalled as e:
        _kill_checks()
        print(f"\neagle3: {signal.Signals(e.signum).name}: stopped", file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:  # a state dir on a full or read-only disk, a vanished mount
        where = f" {e.filename}" if e.filename else ""
        print(f"eagle3: cannot use{where}: {e.strerror or e}; check the path, its permissions "
              f"and free space", file=sys.stderr)
        return EXIT_FAIL
    except SystemExit as e:  # argparse --help
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - the one place an unexpected error becomes a message
        if os.environ.get("EAGLE3_DEBUG"):
            raise
        print(f"eagle3: internal error: {type(e).__name__}: {e} (rerun with EAGLE3_DEBUG=1 for details)",
              file=sys.stderr)
        return EXIT_FAIL


def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "set":  # before the overlay is applied: a bad one must stay fixable
        return _cmd_set(args, out)
    if args.save:
        if not args.set:
            raise UsageError(f"{args.command}: --save remembers --set values; give at least one --set VAR=VALUE")
        _save_overrides(args.config, args.set, [], sys.stderr, what="--set")  # stdout stays the command's
    project = Project.load(args.config, _parse_sets(args.set))
    if not args.save:  # a saved one was noted as it was saved
        _note_misread_paths(project.config.root, _parse_sets(args.set), "--set")
    if args.command != "console":  # Textual has its own handlers
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _raise_signalled)
    handler = {
        "console": _cmd_console, "check": _cmd_check, "run": _cmd_run, "status": _cmd_status,
        "logs": _cmd_logs, "stop": _cmd_stop, "journal": _cmd_journal,
    }[args.command]
    return handler(project, args, out)


def _note_misread_paths(root: Any, values: dict[str, str], flag: str) -> None:
    for line in misread_paths(root, values, Path.cwd(), flag):
        print(f"eagle3: note: {line}", file=sys.stderr)


# -- console ------------------------------------------------------------------------
def _cmd_console(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    if args.serve:
        # Textual and textual-serve load for the console commands only: the others start faster.
        from console.ui.serve import DEFAULT_SESSIONS, ServeError, check_sessions, parse_address, serve

        sessions = DEFAULT_SESSIONS if args.serve_sessions is None else args.serve_sessions
        try:
            parse_address(args.serve)
            check_sessions(sessions)
        except ServeError as e:
            raise UsageError(str(e)) from None
        return serve(project, args.serve, args.set, args.theme, actions=args.serve_actions, sessions=sessions)
    if args.serve_actions or args.serve_sessions is not None:
        raise UsageError("--serve-actions and --serve-sessions go with --serve [HOST:]PORT")
    from console.ui.app import run_console  # Textual, as above

    return int(run_console(project, theme=args.theme, mouse=not args.no_mouse, read_only=args.read_only) or 0)


# -- check --------------------------------------------------------------------------
def _print_results(phase_id: str, results: list[Any], out: TextIO) -> None:
    print(f"{phase_id}:", file=out)
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        mark = CHECK_GLYPHS.get(r.status, "?")
        suffix = f"  [overridden: {r.reason}]" if r.overridden else ""
        print(one_line(f"  {mark} {r.name.ljust(width)}  {r.message}{suffix}"), file=out)


def _print_json(obj: Any, out: TextIO) -> None:
    """The whole document or nothing: rendered first (anything not JSON by its str()), then
    written, so a script never reads half a report."""
    out.write(json.dumps(obj, indent=2, default=str) + "\n")


def _cmd_check(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    phases = [project.config.phase(args.phase)] if args.phase else list(project.config.phases)
    report: dict[str, list[Any]] = {}
    for ph in phases:
        report[ph.id] = project.check(ph.id)
    failed = any(r.blocking for rs in report.values() for r in rs)
    if args.json:
        _print_json({"config": str(project.config.path), "passed": not failed,
                     "phases": {k: [r.to_json() for r in v] for k, v in report.items()}}, out)
    else:
        for pid, rs in report.items():
            _print_results(pid, rs, out)
        print("all checks pass" if not failed else "some checks fail (✗ blocks the start)", file=out)
    return EXIT_FAIL if failed else EXIT_OK


# -- status -------------------------------------------------------------------------
def _fmt_duration(s: float | None) -> str:
    return format_duration(s, unknown="-")


def _cmd_status(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    """Exit codes: 0 no phase is failed (a lost run counts as failed) or stale; 1 otherwise.
    With --watch the figures refresh in place until Ctrl-C, and the code is the last look's."""
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


def _reread(project: Any) -> None:
    """A long --watch shows what the files say now, as the console does."""
    try:
        project.reread()
    except ConfigChanged as e:
        print(f"eagle3: {e}; showing the values it had", file=sys.stderr)


def _status_once(project: Any, snap: Any, args: argparse.Namespace, out: TextIO) -> int:
    bad = [s for s in snap.statuses if s.state in (State.FAILED, State.STALE)]
    code = EXIT_FAIL if bad else EXIT_OK
    if args.json:
        _print_json({"config": str(project.config.path), "name": project.config.name,
                     "state_dir": str(project.config.state_dir), "t": snap.t, "exit_code": code,
                     "saved_overrides": dict(project.config.saved_overrides),
                     "phases": snap.to_json()}, out)
        return code
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
        run = s.run.run_id if s.run else "never run"
        line = (f"{glyph_of(s.state)} {s.phase.id.ljust(idw)}  {s.state:<9}  "
                f"{_fmt_duration(s.duration_s):>7}  {code_s:<7}  {run}")
        if s.reason:
            line += f"  - {s.reason}"
        print(one_line(line), file=out)
        live = pv.live
        if s.state in LIVE and live is not None and live.done is not None:
            print(one_line("    " + _progress_line(live) + ("  ⚠ stalled" if pv.stalled else "")), file=out)
        elif pv.stalled:
            print("    ⚠ stalled: no progress event and no log line", file=out)
        if pv.awaiting_first_unit:
            print(f"    working on its first unit: silent for {_fmt_duration(pv.silent_s)}, its processes busy",
                  file=out)
    return code


def _progress_line(live: Any) -> str:
    done = f"{live.done:,.0f}" + (f"/{live.total:,.0f}" if live.total else "") + f" {live.unit or ''}".rstrip()
    if live.failed:
        done += f", {live.failed:,.0f} failed"
    bits = [f"{100 * live.fraction:.1f}%" if live.fraction is not None else "", done,
            format_rate(live.rate, live.unit or "")]
    if live.eta_s is not None:
        bits.append(f"ETA {_fmt_duration(live.eta_s)}")
    bits += [f.label for f in headline_metrics(live.metrics)[:3]]
    return "  ".join(b for b in bits if b)


# -- logs ---------------------------------------------------------------------------
def _cmd_logs(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    project.config.phase(args.phase)
    rd = project.run_dir(args.phase)
    if rd is None:
        print(f"eagle3: phase {args.phase} has never run; start it with: eagle3 run {args.config} {args.phase}",
              file=sys.stderr)
        return EXIT_FAIL
    if not args.follow:
        copy_log(rd.output_log, out)
        return EXIT_OK

    try:
        follow(rd, out)
    except KeyboardInterrupt:
        print(f"\n(stopped following; the phase goes on. eagle3 stop {args.config} {args.phase} stops it)",
              file=sys.stderr)
        return EXIT_OK
    return EXIT_OK


# -- stop ---------------------------------------------------------------------------
def _cmd_stop(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    if project.stop(args.phase, grace=args.grace):
        print(f"stopped {args.phase}", file=out)
        return EXIT_OK
    print(f"eagle3: phase {args.phase} is not running", file=sys.stderr)
    return EXIT_FAIL


# -- set ----------------------------------------------------------------------------
def _cmd_set(args: argparse.Namespace, out: TextIO) -> int:
    if args.set:
        raise UsageError("set: give VAR=VALUE as arguments (--set applies to one command only)")
    if not args.assignments and not args.clear:
        base = load_config(args.config, saved={})
        file = overlay_path(base.path)
        current = dict(read_saved(base.path))
        if not current:
            print(f"no saved overrides for {base.path} (set one: eagle3 set {args.config} VAR=VALUE)", file=out)
        for name, value in sorted(current.items()):
            print(one_line(f"{name}={value}"), file=out)
        if current:
            print(f"(from {file}; eagle3 set {args.config} --clear VAR forgets one)", file=out)
        return EXIT_OK
    _save_overrides(args.config, args.assignments, args.clear, out)
    return EXIT_OK


def _save_overrides(config_arg: str, assignments: Sequence[str], clear: Sequence[str], out: TextIO,
                    what: str = "set") -> None:
    """Write the overlay with `assignments` set and `clear` removed, validated first, and
    journal the change. Read, changed and written under one lock: two `eagle3 set` at once
    must both land, not the second overwrite the first's value."""
    base = load_config(config_arg, saved={})  # the config alone: an overlay it rejects stays fixable
    with overlay_lock(base.path):
        _save_locked(config_arg, base, assignments, clear, out, what)


def _save_locked(config_arg: str, base: Any, assignments: Sequence[str], clear: Sequence[str], out: TextIO,
                 what: str) -> None:
    file = overlay_path(base.path)
    current = dict(read_saved(base.path))
    given = {}
    for item in assignments:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"{what} {item}: expected VAR=VALUE")
        name = name.strip()
        if name not in base.vars:
            close = difflib.get_close_matches(name, list(base.vars), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UsageError(f"{what} {item}: {base.path} has no variable '{name}' under vars:; {hint}"
                             f"(vars: {', '.join(base.vars) or 'none'})")
        given[name] = value
    new = dict(current)
    for name in clear:
        if name not in new:
            close = difflib.get_close_matches(name, list(new), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise UsageError(f"set --clear {name}: not a saved override{hint} (saved: {', '.join(new) or 'none'})")
        del new[name]
    new.update(given)
    changed = {k: v for k, v in new.items() if current.get(k) != v}
    cleared = [k for k in current if k not in new]
    if not changed and not cleared:
        print("saved overrides unchanged", file=out)
        return
    config = load_config(config_arg, saved=new)  # the values must make a config that loads
    _note_misread_paths(config.root, given, what)
    write_saved(base.path, new)
    Project(config).journal.append("overrides_saved", file=str(file), set=changed, cleared=cleared)
    for name, value in sorted(changed.items()):
        print(one_line(f"saved {name}={value}"), file=out)
    for name in cleared:
        print(f"cleared {name}", file=out)
    print(f"({file}; every command and the console apply it under --set)", file=out)


# -- journal ------------------------------------------------------------------------
def _cmd_journal(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    if args.phase:
        project.config.phase(args.phase)
    scan = project.journal.scan(phase=args.phase, limit=args.limit, max_bytes=None)
    records = scan.records
    if scan.skipped:
        print(f"eagle3: skipped {scan.skipped} line(s) of {project.journal.path} that are not journal records "
              "(torn, or fields of the wrong type)", file=sys.stderr)
    if args.json:
        _print_json(records, out)
        return EXIT_OK
    for r in records:
        print(format_journal_record(r), file=out)
    return EXIT_OK


def format_journal_record(r: dict[str, Any]) -> str:
    t = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("t", 0)))
    ev = r.get("event", "?")
    phase = r.get("phase", "")
    detail = ""
    if ev == "override":
        detail = f"check {r.get('check')} overridden: {r.get('reason')}"
    elif ev == "run_started":
        detail = f"run {r.get('run_id')}"
    elif ev == "run_ended":
        took = _fmt_duration(r.get("duration_s"))
        if r.get("stopped"):
            detail = f"run {r.get('run_id')} stopped after {took}"
        elif r.get("code") is None:
            why = r.get("error") or f"killed by {signal_name(r.get('signal'))}"
            detail = f"run {r.get('run_id')} ended after {took}: {why}"
        else:
            detail = f"run {r.get('run_id')} exit {r.get('code')} in {took}, verify {r.get('verify')}"
    elif ev in ("checks", "verify"):
        res = r.get("results") or []
        bad = [x["name"] for x in res if x.get("status") == "fail" and not x.get("overridden")]
        detail = "pass" if not bad else "fail: " + ", ".join(bad)
    elif ev == "stop":
        detail = f"run {r.get('run_id', '')}"
    elif ev == "confirm":
        detail = "confirmed by typing the phase id"
    elif ev == "overrides_saved":
        bits = [f"{k}={v}" for k, v in sorted((r.get("set") or {}).items())]
        bits += [f"cleared {k}" for k in r.get("cleared") or []]
        detail = "saved overrides: " + ", ".join(bits)
    return one_line(f"{t}  {r.get('user', '?'):<10} {ev:<12} {phase:<14} {detail}".rstrip())


# -- run ----------------------------------------------------------------------------
class _Answers:
    """The command line's answers to the start flow: what its flags said up front (--rerun,
    --confirm, --override), else a prompt on a terminal, else a refusal naming the flag a
    script must give. `code`: the exit code of the question left unanswered."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.code = EXIT_FAIL

    def rerun(self, question: RerunNeeded) -> bool:
        pid, after = question.request.phase_id, question.dependents
        tail = f"; phases that need it ({', '.join(after)}) become stale" if after else ""
        if not sys.stdin.isatty():
            print(f"eagle3: phase {pid} is done{tail}. To run it again: "
                  f"eagle3 run {self.args.config} {pid} --rerun", file=sys.stderr)
            self.code = EXIT_USAGE
            return False
        try:
            answer = input(f"phase {pid} is done{tail}. Run it again? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            print(f"eagle3: {pid} not run", file=sys.stderr)
            self.code = EXIT_FAIL
            return False
        return True

    def confirm(self, question: ConfirmationNeeded) -> bool:
        pid = question.request.phase_id
        self.code = EXIT_FAIL
        if not sys.stdin.isatty():
            print(f"eagle3: phase {pid} needs confirmation:\n{question.summary}\n"
                  f"rerun with --confirm {pid} to confirm", file=sys.stderr)
            return False
        print(f"phase {pid} needs confirmation:\n{question.summary}", file=sys.stderr)
        return input(f"type the phase id ({pid}) to go ahead: ").strip() == pid

    def override(self, question: BlockedStart) -> None:
        self.code = EXIT_FAIL
        return None  # a command line gives its overrides up front


def _cmd_run(project: Any, args: argparse.Namespace, out: TextIO) -> int:
    if args.all == bool(args.phase):
        raise UsageError("run: name one PHASE or give --all")
    if args.override and not args.reason:
        raise UsageError("run: --override needs --reason TEXT (it is recorded in the journal)")
    overrides = {name: args.reason for name in args.override}
    answers = _Answers(args)
    if args.all:
        return _run_all(project, args, overrides, answers, out)
    request = StartRequest(args.phase, overrides, confirmed=args.phase in args.confirm, rerun=args.rerun)
    result = drive(project, request, answers)
    code = _report_start(result, answers, out)
    if code != EXIT_OK or not args.wait or not isinstance(result, Started):
        return code
    return _wait(project, project.config.phase(args.phase), result.run, out, args)


def _report_start(result: StartResult, answers: _Answers, out: TextIO) -> int:
    pid = result.request.phase_id
    if isinstance(result, Started):
        print(f"started {pid}: run {result.run.run_id} (log: {result.run.output_log})", file=out)
        return EXIT_OK
    if isinstance(result, BlockedStart):
        _print_results(pid, result.results, sys.stderr)
        print(f"eagle3: {pid} is blocked; {override_hint([r.name for r in result.failing])}", file=sys.stderr)
        return EXIT_FAIL
    if isinstance(result, AlreadyLive):
        st = result.status
        print(f"eagle3: phase {pid} is already {st.state}" + (f" (pid {st.pid})" if st.pid else "")
              + "; stop it first or wait", file=sys.stderr)
        return EXIT_FAIL
    if isinstance(result, Refused):
        print(f"eagle3: {result.message}", file=sys.stderr)
        return EXIT_FAIL
    return answers.code  # a question left unanswered said why as it was asked


def _report_wait(waited: Waited, args: argparse.Namespace, out: TextIO) -> int:
    pid, st = waited.phase.id, waited.status
    if waited.outcome == "ready":
        print(f"{pid} is ready", file=out)
        return EXIT_OK
    if waited.outcome == "done":
        print(f"{State.DONE.glyph} {pid} done (exit {st.exit_code}, {_fmt_duration(st.duration_s)})", file=out)
        return EXIT_OK
    if waited.outcome == "not_ready":
        print(f"eagle3: service {pid} not ready after {args.timeout:.0f}s; it keeps running", file=sys.stderr)
    elif waited.phase.kind == "service":
        print(f"eagle3: service {pid} ended before it became ready ({st.state}: {st.reason})", file=sys.stderr)
    else:
        if st.verify:
            _print_results(f"{pid} verify", st.verify, sys.stderr)
        print(f"eagle3: {pid} {st.state}: {st.reason}", file=sys.stderr)
    return EXIT_FAIL


def _stopped_waiting(phase: Any, args: argparse.Namespace) -> None:
    if phase.kind != "service":
        print(f"\n(stopped waiting; {phase.id} goes on. eagle3 stop {args.config} {phase.id} stops it)",
              file=sys.stderr)


def _wait(project: Any, phase: Any, run: Any, out: TextIO, args: argparse.Namespace) -> int:
    try:
        waited = wait(project, phase, run, out, args.timeout)
    except KeyboardInterrupt:
        _stopped_waiting(phase, args)
        raise
    return _report_wait(waited, args, out)


def _run_all(project: Any, args: argparse.Namespace, overrides: dict[str, str], answers: _Answers,
             out: TextIO) -> int:
    unknown = unknown_overrides(project.config, overrides)
    if unknown:
        raise UsageError(f"run --all: --override {unknown[0]}: no phase has a check of that name")
    code = EXIT_OK
    waiting = None  # the phase whose run the walk is waiting on
    try:
        for step in run_all(project, overrides, answers, out, args.timeout, frozenset(args.confirm)):
            if isinstance(step, Skipped):
                print(f"{State.DONE.glyph} {step.status.phase.id}: {step.status.state}, skipped", file=out)
            elif isinstance(step, Attaching):
                print(f"{step.phase.id} is already running; waiting for it", file=out)
                waiting = step.phase
            elif isinstance(step, Entering):
                print(f"── {step.phase.id}: {step.phase.title}", file=out)
            elif isinstance(step, Waited):
                waiting = None
                code = _report_wait(step, args, out)
            elif isinstance(step, Halted):
                print(f"eagle3: stopped at {step.phase.id}; fix it and rerun `eagle3 run {args.config} --all` "
                      f"to resume from there", file=sys.stderr)
                return code
            elif isinstance(step, AllDone):
                print("all phases done", file=out)
                return EXIT_OK
            else:
                code = _report_start(step, answers, out)
                if isinstance(step, Started):
                    waiting = project.config.phase(step.request.phase_id)
    except KeyboardInterrupt:
        if waiting is not None:
            _stopped_waiting(waiting, args)
        raise
    return code


if __name__ == "__main__":
    sys.exit(main())
