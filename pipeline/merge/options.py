"""What a merge is asked for: its command line, and the options it parses into."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.chat.sources import DEFAULT_ROLE_MAP, format_role_map
from pipeline.program_edge import BadInput


@dataclass(frozen=True)
class Options:
    """What a merge was asked for: the command line's flags, checked by `merge`."""

    tokenizer: str
    out: Path
    sources: list[str] = field(default_factory=list)
    stats: Path | None = None
    max_len: int = 512
    on_long: str = "truncate"
    max_line_bytes: int | None = None
    seed: int = 0
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    workers: int = min(os.cpu_count() or 1, 8)  # tokenizer processes; the output does not depend on them
    strict: bool = False
    max_invalid: float = 0.05
    role_map: str = format_role_map(DEFAULT_ROLE_MAP)
    on_assistant_first: str = "keep"
    same_role: str = "join"

    def validate(self) -> None:
        """BadInput for a value past its bound or no source at all; nothing is filled in."""
        if self.max_len < 1:
            raise BadInput(f"--max-len must be at least 1, got {self.max_len}")
        if self.workers < 1:
            raise BadInput(f"--workers must be at least 1, got {self.workers}")
        if self.max_line_bytes is not None and self.max_line_bytes < 2:
            raise BadInput(f"--max-line-bytes must be at least 2, got {self.max_line_bytes}")
        if not self.sources:
            trailing = (self.include or self.exclude or [""])[-1]
            hint = ""
            if trailing and Path(trailing).exists():
                hint = f" ('{trailing}' was read as a source name: put sources before --include/--exclude or end them with --)"
            raise BadInput(f"no SOURCE given{hint}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.merge",
        description="Merge chat JSONL sources into one shuffled training set: token ids plus an "
        "assistant-only loss mask per record, rendered with the target's chat template.",
        epilog="A source's name is its file stem; a DIR stands for every *.jsonl and *.json in it. A file "
        "that starts with '[' is read as a JSON array, element by element. Give sources "
        "before --include/--exclude, or end those lists with --.",
    )
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="chat JSONL or JSON-array files, or folders of them")
    p.add_argument("--tokenizer", required=True, metavar="PATH", help="tokenizer folder, or the target model folder")
    p.add_argument("--out", required=True, type=Path, metavar="OUT.jsonl", help="merged dataset to write")
    p.add_argument("--stats", type=Path, metavar="STATS.json", help="stats file (default: <out stem>.stats.json next to --out)")
    p.add_argument("--max-len", type=int, default=Options.max_len, metavar="N",
                   help=f"longest record in tokens (default {Options.max_len})")
    p.add_argument(
        "--on-long",
        choices=("truncate", "drop"),
        default=Options.on_long,
        help=f"what to do with a record longer than --max-len (default {Options.on_long})",
    )
    p.add_argument(
        "--max-line-bytes",
        type=int,
        default=Options.max_line_bytes,
        metavar="N",
        help="skip input lines longer than this unread (default: 8 bytes per character --max-len could keep, "
        "at least 16 MiB)",
    )
    p.add_argument("--seed", type=int, default=Options.seed, help=f"shuffle seed (default {Options.seed})")
    p.add_argument("--include", nargs="+", action="extend", default=[], metavar="SRC", help="keep only these sources")
    p.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="SRC", help="leave these sources out")
    p.add_argument(
        "--workers",
        type=int,
        default=Options.workers,
        metavar="N",
        help="tokenizer processes (default: CPU count, at most 8); output does not depend on it",
    )
    p.add_argument("--strict", action="store_true", help="stop (exit 2) at the first unusable record instead of skipping it")
    p.add_argument(
        "--max-invalid",
        type=float,
        default=Options.max_invalid,
        metavar="SHARE",
        help=f"largest share of a source's records that may be unusable (default {Options.max_invalid}); past it, "
        "exit 2: "
        "a mostly-bad file is probably the wrong file",
    )
    p.add_argument(
        "--role-map",
        default=Options.role_map,
        metavar="NAME=ROLE,...",
        help=f"extra speaker names and the role each stands for (default {Options.role_map}, "
        "ShareGPT's extra roles; giving it replaces the default, '' maps none)",
    )
    p.add_argument(
        "--on-assistant-first",
        choices=("keep", "drop"),
        default=Options.on_assistant_first,
        help="records that open with an assistant turn (ShareGPT continuation chunks): keep (default; only "
        "assistant text is learnt) or drop; counted either way",
    )
    p.add_argument(
        "--same-role",
        choices=("join", "drop"),
        default=Options.same_role,
        help="consecutive turns of one role: join them into one turn (default) or drop the record; counted either way",
    )
    return p


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line; argparse's own errors exit 2 with its usage."""
    return Options(**vars(build_parser().parse_args(argv)))
