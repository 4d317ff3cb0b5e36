"""What an evaluation is asked for: its command line, and the frozen options it parses into
(defaults written once, in `Options`; `validate()` holds every value to its bound before anything loads)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cpu_threads
from pipeline.evaluate.errors import BadInput

PROG = "python -m pipeline.evaluate"
MAX_STEPS = 16
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 64
MAX_SETTINGS = 64  # --max-settings' default: each setting decodes every prompt again
MAX_NEW = 4096


@dataclass(frozen=True)
class Options:
    """The command line's flags as `build_parser` parsed them; `validate()` holds them to their
    bounds and fills nothing in."""

    drafter: Path | None = None
    baseline: bool = False
    no_kv_cache: bool = False
    target: Path | None = None
    server: str | None = None
    prompts: Path | None = None
    demo_prompts: int | None = None
    demo_seed: int = 1  # the demo trains on seed 0
    exclude: Path | None = None
    num_steps: int | None = None  # None: 3, or the server's own
    configs: list[str] | None = None
    max_settings: int = MAX_SETTINGS
    references: Path | None = None
    batch: int | None = None  # None: 16 on a GPU, 1 on a CPU
    limit: int = 32
    max_new_tokens: int = 64
    device: str | None = None
    dtype: str = "fp32"
    report: Path | None = None
    concurrency: int = 4
    timeout: float = 300.0
    threads: int | None = None

    def validate(self) -> None:
        """BadInput for a combination or a value past its bound; nothing is filled in."""
        if self.prompts is None and self.demo_prompts is None:
            raise BadInput(f"give --prompts FILE or --demo-prompts N; see {PROG} --help")
        if self.server is None and (self.target is None or (self.drafter is None and not self.baseline)):
            raise BadInput("local evaluation needs --target and --drafter, --baseline or both (or pass --server URL)")
        if self.server is not None and (self.baseline or self.no_kv_cache or self.configs):
            raise BadInput("--baseline, --no-kv-cache and --configs are for local evaluation; drop them with --server")
        if self.num_steps is not None and not 1 <= self.num_steps <= MAX_STEPS:
            raise BadInput(f"--num-steps must be between 1 and {MAX_STEPS}, got {self.num_steps}")
        if not 1 <= self.max_new_tokens <= MAX_NEW:
            raise BadInput(f"--max-new-tokens must be between 1 and {MAX_NEW}, got {self.max_new_tokens}")
        if self.demo_prompts is not None and self.target is None:
            raise BadInput("--demo-prompts needs --target (its tokenizer renders the chats)")
        if self.batch is not None and not 1 <= self.batch <= 256:
            raise BadInput(f"--batch must be between 1 and 256, got {self.batch}")
        if not 1 <= self.concurrency <= 64:
            raise BadInput(f"--concurrency must be between 1 and 64, got {self.concurrency}")
        if not 0 < self.timeout <= 86400:
            raise BadInput(f"--timeout must be between 0 and 86400 seconds, got {self.timeout}")
        if not 1 <= self.max_settings <= 100_000:
            raise BadInput(f"--max-settings must be between 1 and 100000, got {self.max_settings}")
        if self.configs is not None and self.num_steps is not None:
            raise BadInput("give --num-steps or --configs, not both (--configs 3,1,4 is --num-steps 3)")
        if self.configs is not None:
            _refuse_unbounded(self, setting_texts(self.configs))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Measure an exported EAGLE-3 drafter's acceptance length.")
    p.add_argument("--drafter", type=Path, help="folder written by pipeline.export")
    p.add_argument("--baseline", action="store_true",
                   help="also score the untrained drafter training starts from (alone when no --drafter)")
    p.add_argument("--no-kv-cache", action="store_true",
                   help="run every target forward on the whole sequence (the slow reference path)")
    p.add_argument("--target", type=Path, help="target model folder (with --server: only its tokenizer is read)")
    p.add_argument("--server", metavar="URL", help="query a running SGLang server instead (e.g. http://127.0.0.1:30000)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", type=Path, help="held-out prompts: chat records or merged records (JSONL)")
    src.add_argument("--demo-prompts", type=int, metavar="N", help="N chats from the demo's generator at --demo-seed")
    p.add_argument("--demo-seed", type=int, default=Options.demo_seed,
                   help=f"seed for --demo-prompts (default {Options.demo_seed}; the demo trains on 0)")
    p.add_argument("--exclude", type=Path, metavar="TRAIN.jsonl", help="merged training set whose prompts are dropped")
    p.add_argument("--num-steps", type=int, default=Options.num_steps,
                   help=f"drafts per round of a chain, 1..{MAX_STEPS} (default 3; the same as --configs N,1,N+1); with "
                        "--server, the server's --speculative-num-steps, which bounds the acceptance length it reports")
    p.add_argument("--configs", nargs="+", metavar="STEPS,TOPK,DRAFT_TOKENS",
                   help="SGLang settings to sweep (--speculative-num-steps, --speculative-eagle-topk, "
                        "--speculative-num-draft-tokens), e.g. 3,1,4 5,4,8 7,8,32")
    p.add_argument("--max-settings", type=int, default=Options.max_settings, metavar="N",
                   help=f"the most --configs settings one evaluation decodes (default {Options.max_settings}); each "
                        "decodes "
                        "every prompt again")
    p.add_argument("--references", type=Path, metavar="DIR",
                   help="keep greedy references here, per target fingerprint and prompt, so the next evaluation "
                        "of the same target does not decode them again (default: keep none)")
    p.add_argument("--batch", type=int, metavar="N",
                   help="prompts decoded in lockstep, 1..256 (default 16 on a GPU, 1 on a CPU; chains only)")
    p.add_argument("--limit", type=int, default=Options.limit, help=f"prompts evaluated (default {Options.limit})")
    p.add_argument("--max-new-tokens", type=int, default=Options.max_new_tokens,
                   help=f"tokens generated per prompt, 1..{MAX_NEW} (default {Options.max_new_tokens})")
    p.add_argument("--device", default=Options.device, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=Options.dtype, choices=["fp32", "bf16", "fp16"],
                   help=f"compute dtype (default {Options.dtype})")
    p.add_argument("--report", type=Path, help="write the figures here as JSON")
    p.add_argument("--concurrency", type=int, default=Options.concurrency,
                   help=f"--server: requests in flight, 1..64 (default {Options.concurrency})")
    p.add_argument("--timeout", type=float, default=Options.timeout,
                   help=f"--server: seconds per request (default {Options.timeout:g})")
    cpu_threads.add_option(p)
    return p


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line; argparse's own errors exit 2 with its usage."""
    return Options(**vars(build_parser().parse_args(argv)))


def setting_texts(configs: list[str]) -> list[str]:
    return " ".join(configs).split()  # one argument may hold several (a config variable)


def _refuse_unbounded(opts: Options, texts: list[str]) -> None:
    """Before anything loads: an empty --configs, and more settings than --max-settings (each
    decodes every prompt again: 10,000 of them were about 28 hours on the tiny demo target)."""
    if not texts:
        raise BadInput("--configs names no setting; give one or more STEPS,TOPK,DRAFT_TOKENS (e.g. --configs 3,1,4 "
                       "5,4,8), or leave it out for --num-steps")
    if len(texts) > opts.max_settings:
        prompts = min(opts.limit, opts.demo_prompts or opts.limit)
        raise BadInput(f"--configs gives {len(texts)} settings, more than --max-settings {opts.max_settings}: each "
                       f"decodes every prompt again ({len(texts)} x up to {prompts} prompts x up to "
                       f"{opts.max_new_tokens} tokens); pass fewer, or raise --max-settings to run them all")
