"""The `eagle3` parser: the arguments every command shares (the config first, --set, --save),
then each command's own, from its module."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from console.cli import check, journal, logs, run, status, stop
from console.cli import console as console_command
from console.cli import set as set_command
from console.cli.edge import UsageError

# In the order `eagle3 --help` lists them.
COMMANDS = {"console": console_command, "check": check, "run": run, "status": status, "logs": logs,
            "stop": stop, "set": set_command, "journal": journal}

# The optional positionals a command takes anywhere among its options: argparse fills one
# with nothing when it meets the config, so a phase typed after `--set X=Y` came back as an
# unrecognized argument.
TRAILING = {"check": "phase", "run": "phase", "set": "assignments"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sub = self.prog.removeprefix("eagle3").strip()
        raise UsageError(f"{sub + ': ' if sub else ''}{message} (see {self.prog} --help)")


def parse_sets(values: Sequence[str] | None) -> dict[str, str]:
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
    for name, module in COMMANDS.items():
        c = sub.add_parser(name, help=module.HELP, description=module.HELP, epilog=getattr(module, "EPILOG", None),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_argument("config", help="pipeline YAML (e.g. configs/demo.yaml)")
        c.add_argument("--set", action="append", metavar="VAR=VALUE", default=[],
                       help="override a config variable (repeatable)")
        if name != "set":
            c.add_argument("--save", action="store_true",
                           help="also remember the --set values for every later command (eagle3 set)")
        module.add_arguments(c)
    return p


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
