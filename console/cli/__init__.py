"""`eagle3`: the console's command line, a module per command (as DVC's `dvc/commands/`).
Every command takes the config first, shares the core with the TUI, and ends with an exit code
a script can trust: 0 ok, 1 a check or a phase failed, 2 the config or the arguments are
wrong. No traceback reaches the operator: `main` turns every error into a line and a code."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from console.cli import set as set_command
from console.cli.edge import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Signalled, UsageError, kill_checks, raise_signalled
from console.cli.parser import COMMANDS, parse_args, parse_sets
from console.cli.printing import note_misread_paths
from console.core.config.saved import BadOverride
from console.core.lifecycle.project import Project
from console.core.model.config import UnknownPhase
from console.core.text.errors import ConfigError, Eagle3Error


def main(argv: Sequence[str] | None = None) -> int:
    out = sys.stdout
    try:
        args = parse_args(argv)
        return _dispatch(args, out)
    except (ConfigError, UsageError, UnknownPhase, BadOverride) as e:
        print(f"eagle3: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Eagle3Error as e:
        print(f"eagle3: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        kill_checks()
        print("\neagle3: interrupted", file=sys.stderr)
        return 130
    except Signalled as e:
        kill_checks()
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
        return set_command.run(args, out)
    if args.save:
        if not args.set:
            raise UsageError(f"{args.command}: --save remembers --set values; give at least one --set VAR=VALUE")
        set_command.save(args.config, args.set, [], sys.stderr, what="--set")  # stdout stays the command's
    project = Project.load(args.config, parse_sets(args.set))
    if not args.save:  # a saved one was noted as it was saved
        note_misread_paths(project.config.root, parse_sets(args.set), "--set")
    if args.command != "console":  # Textual has its own handlers
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, raise_signalled)
    return COMMANDS[args.command].run(project, args, out)
