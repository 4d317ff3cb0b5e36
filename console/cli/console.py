"""`eagle3 console`: the operator console in this terminal, or served to a browser."""

from __future__ import annotations

import argparse
from typing import TextIO

from console.cli.edge import UsageError
from console.core.lifecycle.project import Project

HELP = "open the operator console (TUI)"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--theme", help="theme name (eagle3-dark, eagle3-light, eagle3-ansi, or any Textual theme)")
    c.add_argument("--no-mouse", action="store_true", help="keyboard only; leave the mouse to tmux")
    c.add_argument("--serve", metavar="[HOST:]PORT",
                   help="serve the console to a browser (textual-serve); HOST defaults to 127.0.0.1")
    c.add_argument("--serve-actions", action="store_true",
                   help="with --serve: allow run, stop, check and verify (read-only otherwise)")
    c.add_argument("--serve-sessions", type=int, default=None, metavar="N",
                   help="with --serve: at most N browser sessions at once (default 2, at most 16)")
    c.add_argument("--read-only", action="store_true", help=argparse.SUPPRESS)  # what --serve runs


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
    if args.serve:
        # Textual and textual-serve load for the console commands only: the others start faster.
        from console.ui.serve_rules import (
            DEFAULT_SESSIONS,
            ServeError,
            check_sessions,
            parse_address,
            require_textual_serve,
        )

        sessions = DEFAULT_SESSIONS if args.serve_sessions is None else args.serve_sessions
        try:
            parse_address(args.serve)
            check_sessions(sessions)
        except ServeError as e:
            raise UsageError(str(e)) from None
        require_textual_serve()
        from console.ui.serve import serve

        return serve(project, args.serve, args.set, args.theme, actions=args.serve_actions, sessions=sessions)
    if args.serve_actions or args.serve_sessions is not None:
        raise UsageError("--serve-actions and --serve-sessions go with --serve [HOST:]PORT")
    from console.ui.app import run_console  # Textual, as above

    return int(run_console(project, theme=args.theme, mouse=not args.no_mouse, read_only=args.read_only) or 0)
