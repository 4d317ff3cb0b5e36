"""The demo's command line."""

from __future__ import annotations

import argparse
from pathlib import Path

QUICK_STEPS = 80
DEFAULT_STEPS = 300


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.demo",
        description="Build the demo's chat datasets, byte-level BPE tokenizer and small Llama target, "
        "deterministically and offline.",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to build into (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="seed for data, tokenizer and weights (default 0)")
    p.add_argument(
        "--train-steps",
        type=int,
        default=None,
        metavar="N",
        help=f"target training steps (default {DEFAULT_STEPS}, about two CPU minutes; {QUICK_STEPS} with --quick)",
    )
    p.add_argument("--quick", action="store_true", help="tiny data and model for tests: seconds, not minutes")
    return p
