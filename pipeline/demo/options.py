"""What a demo build is asked for: its command line, and the frozen options it parses into
(defaults written once, in `Options`; `validate()` only refuses)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.program_edge import BadInput

PROG = "python -m pipeline.demo"
QUICK_STEPS = 80
DEFAULT_STEPS = 300


@dataclass(frozen=True)
class Options:
    """What the build was asked for: the command line's flags."""

    out: Path
    seed: int = 0
    train_steps: int | None = None  # None: DEFAULT_STEPS, QUICK_STEPS with --quick (build.py)
    quick: bool = False

    def validate(self) -> None:
        """BadInput for a value past its bound; nothing is filled in."""
        if self.train_steps is not None and self.train_steps < 1:
            raise BadInput(f"--train-steps must be at least 1, got {self.train_steps}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Build the demo's chat datasets, byte-level BPE tokenizer and small Llama target, "
        "deterministically and offline.",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to build into (created if missing)")
    p.add_argument("--seed", type=int, default=Options.seed,
                   help=f"seed for data, tokenizer and weights (default {Options.seed})")
    p.add_argument(
        "--train-steps",
        type=int,
        default=Options.train_steps,
        metavar="N",
        help=f"target training steps (default {DEFAULT_STEPS}, about two CPU minutes; {QUICK_STEPS} with --quick)",
    )
    p.add_argument("--quick", action="store_true", help="tiny data and model for tests: seconds, not minutes")
    return p


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line; argparse's own errors exit 2 with its usage."""
    return Options(**vars(build_parser().parse_args(argv)))
