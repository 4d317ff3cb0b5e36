"""`eagle3 stop`: SIGTERM to a running phase's process group, then SIGKILL after a grace."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from console.cli.edge import EXIT_FAIL, EXIT_OK
from console.core.lifecycle.project import Project

HELP = "stop a running phase (SIGTERM to its process group, then SIGKILL)"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("phase")
    c.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
    if project.stop(args.phase, grace=args.grace):
        print(f"stopped {args.phase}", file=out)
        return EXIT_OK
    print(f"eagle3: phase {args.phase} is not running", file=sys.stderr)
    return EXIT_FAIL
