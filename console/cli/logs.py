"""`eagle3 logs`: a phase's latest log, or followed until the phase ends."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from console.cli.edge import EXIT_FAIL, EXIT_OK
from console.core.flow.waiting import copy_log, follow
from console.core.lifecycle.project import Project

HELP = "print a phase's latest log"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("phase")
    c.add_argument("-f", "--follow", action="store_true", help="follow until the phase ends")


def run(project: Project, args: argparse.Namespace, out: TextIO) -> int:
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
