"""The patch's command line, and the options it parses into."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Options:
    """What the patch was asked to do, and to which file: `--file` or `--module`, one of them."""

    action: str
    file: Path | None = None
    module: str | None = None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipeline.patch",
                                 description="Apply, verify or revert the SGLang hidden-state dump patch.")
    ap.add_argument("action", choices=["apply", "verify", "revert", "status"])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--file", type=Path, help="the model file, e.g. .../sglang/srt/models/deepseek_v2.py")
    where.add_argument("--module", help="the model module, e.g. sglang.srt.models.deepseek_v2 "
                                        "(found by this interpreter without importing sglang)")
    return ap


def parse(argv: list[str] | None) -> Options:
    return Options(**vars(build_parser().parse_args(argv)))
