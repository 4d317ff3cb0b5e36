"""`eagle3 set`: list, remember or forget the variable overrides every command applies under
--set (the saving itself is the core's, console/core/config/saved.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TextIO

from console.cli.edge import EXIT_OK, UsageError
from console.cli.printing import note_misread_paths
from console.core.config.loader import load_config
from console.core.config.overlay import overlay_path, read_saved
from console.core.config.saved import save_overrides
from console.core.text.terminal_text import one_line

HELP = ("remember variable overrides for this config: every command (the console too) applies "
        "them under --set; with no VAR=VALUE, list them")


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("assignments", nargs="*", metavar="VAR=VALUE")
    c.add_argument("--clear", action="append", default=[], metavar="VAR", help="forget one (repeatable)")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Runs before the overlay is applied: an overlay the config rejects must stay fixable."""
    if args.set:
        raise UsageError("set: give VAR=VALUE as arguments (--set applies to one command only)")
    if not args.assignments and not args.clear:
        _list(args.config, out)
        return EXIT_OK
    save(args.config, args.assignments, args.clear, out)
    return EXIT_OK


def _list(config_arg: str, out: TextIO) -> None:
    base = load_config(config_arg, saved={})
    file = overlay_path(base.path)
    current = dict(read_saved(base.path))
    if not current:
        print(f"no saved overrides for {base.path} (set one: eagle3 set {config_arg} VAR=VALUE)", file=out)
    for name, value in sorted(current.items()):
        print(one_line(f"{name}={value}"), file=out)
    if current:
        print(f"(from {file}; eagle3 set {config_arg} --clear VAR forgets one)", file=out)


def save(config_arg: str, assignments: Sequence[str], clear: Sequence[str], out: TextIO,
         what: str = "set") -> None:
    """Save and say what was saved; `--set ... --save` on another command comes here too."""
    saved = save_overrides(config_arg, assignments, clear, what)
    if saved.config is None:
        print("saved overrides unchanged", file=out)
        return
    note_misread_paths(saved.config.root, saved.given, what)
    for name, value in sorted(saved.changed.items()):
        print(one_line(f"saved {name}={value}"), file=out)
    for name in saved.cleared:
        print(f"cleared {name}", file=out)
    print(f"({saved.file}; every command and the console apply it under --set)", file=out)
