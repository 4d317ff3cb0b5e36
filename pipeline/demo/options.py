"""The demo's command line, and the options it parses into."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from pipeline.program_edge import BadInput

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
        if self.train_steps is not None and self.train_steps < 1:
            raise BadInput(f"--train-steps must be at least 1, got {self.train_steps}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.demo",
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


def parse(argv: list[str] | None) -> Options:
    """The options, validated (BadInput past a bound); argparse's own errors exit 2 as they do."""
    options = Options(**vars(build_parser().parse_args(argv)))
    options.validate()
    return options
