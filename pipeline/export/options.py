"""What an export is asked for: its command line, and the frozen options it parses into
(defaults written once, in `Options`; `validate()` refuses a run without the flags it needs)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cpu_threads
from pipeline.export.convert import DEFAULT_MODE
from pipeline.program_edge import BadInput

PROG = "python -m pipeline.export"
DTYPES = {"target": "target", "keep": None, "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Options:
    """The command line's flags as `build_parser` parsed them."""

    checkpoint: Path | None = None
    target: Path | None = None
    out: Path | None = None
    dtype: str = "target"
    mode: int = DEFAULT_MODE
    verify: Path | None = None
    threads: int | None = None

    def validate(self) -> None:
        """BadInput when a flag an export needs is missing (--verify alone needs none); nothing is filled in."""
        missing = [f"--{n}" for n in ("checkpoint", "target", "out") if getattr(self, n) is None]
        if missing and self.verify is None:
            raise BadInput(f"missing {', '.join(missing)}; see {PROG} --help")


def _mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal file mode like 0644") from None
    if not 0 <= mode <= 0o777 or not mode & 0o400:
        raise argparse.ArgumentTypeError(f"{text!r}: a mode from 0400 to 0777 that the owner can read")
    return mode


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Write a trained EAGLE-3 drafter as a folder SGLang loads.")
    p.add_argument("--checkpoint", type=Path, help="training output folder (its 'latest' pointer) or a checkpoint folder")
    p.add_argument("--target", type=Path, help="the target model folder (config.json: rope, positions, layer count)")
    p.add_argument("--out", type=Path, help="drafter folder to write: new, or one an earlier export wrote "
                   "(replaced atomically)")
    p.add_argument("--dtype", default=Options.dtype, choices=sorted(DTYPES),
                   help=f"weights dtype (default {Options.dtype}: the target's, e.g. bf16; keep: as trained)")
    p.add_argument("--mode", type=_mode, default=Options.mode, metavar="OCTAL",
                   help=f"permissions of the written files (default {Options.mode:04o}: a server of another user "
                   "can read them)")
    p.add_argument("--verify", type=Path, metavar="DRAFTER", help="check an exported folder and exit")
    cpu_threads.add_option(p)
    return p


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line; argparse's own errors exit 2 with its usage."""
    return Options(**vars(build_parser().parse_args(argv)))

