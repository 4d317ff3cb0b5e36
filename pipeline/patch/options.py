"""What the patch is asked to do: its command line, and the frozen options it parses into
(defaults written once, in `Options`; `validate()` only refuses)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.program_edge import BadInput

PROG = "python -m pipeline.patch"


@dataclass(frozen=True)
class Options:
    """What the patch was asked to do, and to which file: `--file` or `--module`, one of them."""

    action: str
    file: Path | None = None
    module: str | None = None

    def validate(self) -> None:
        """BadInput for a --module that is not a dotted name; where it is found is patcher.module_file's."""
        if self.module is not None and not all(p.isidentifier() for p in self.module.split(".")):
            raise BadInput(f"--module {self.module!r} is not a dotted module name like sglang.srt.models.llama")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG,
                                 description="Apply, verify or revert the SGLang hidden-state dump patch.")
    ap.add_argument("action", choices=["apply", "verify", "revert", "status"])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--file", type=Path, help="the model file, e.g. .../sglang/srt/models/deepseek_v2.py")
    where.add_argument("--module", help="the model module, e.g. sglang.srt.models.deepseek_v2 "
                                        "(found by this interpreter without importing sglang)")
    return ap


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line; argparse's own errors exit 2 with its usage."""
    return Options(**vars(build_parser().parse_args(argv)))
