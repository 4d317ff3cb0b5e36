"""What an evaluation is asked for: its command line, the options it parses into (defaults
written once, in the parser), and the bounds every value is held to before anything loads."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cpu_threads

from .errors import BadInput

PROG = "python -m pipeline.evaluate"
MAX_STEPS = 16
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 64
MAX_SETTINGS = 64  # --max-settings' default: each setting decodes every prompt again
MAX_NEW = 4096


@dataclass(frozen=True)
class EvalOptions:
    """The command line's flags as `build_parser` parsed them (its defaults), held to their
    bounds by `validate`."""

    drafter: Path | None
    baseline: bool
    no_kv_cache: bool
    target: Path | None
    server: str | None
    prompts: Path | None
    demo_prompts: int | None
    demo_seed: int
    exclude: Path | None
    num_steps: int | None
    configs: list[str] | None
    max_settings: int
    references: Path | None
    batch: int | None
    limit: int
    max_new_tokens: int
    device: str | None
    dtype: str
    report: Path | None
    concurrency: int
    timeout: float
    threads: int | None


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
    p.add_argument("--demo-seed", type=int, default=1, help="seed for --demo-prompts (default 1; the demo trains on 0)")
    p.add_argument("--exclude", type=Path, metavar="TRAIN.jsonl", help="merged training set whose prompts are dropped")
    p.add_argument("--num-steps", type=int, default=None,
                   help=f"drafts per round of a chain, 1..{MAX_STEPS} (default 3; the same as --configs N,1,N+1); with "
                        "--server, the server's --speculative-num-steps, which bounds the acceptance length it reports")
    p.add_argument("--configs", nargs="+", metavar="STEPS,TOPK,DRAFT_TOKENS",
                   help="SGLang settings to sweep (--speculative-num-steps, --speculative-eagle-topk, "
                        "--speculative-num-draft-tokens), e.g. 3,1,4 5,4,8 7,8,32")
    p.add_argument("--max-settings", type=int, default=MAX_SETTINGS, metavar="N",
                   help=f"the most --configs settings one evaluation decodes (default {MAX_SETTINGS}); each decodes "
                        "every prompt again")
    p.add_argument("--references", type=Path, metavar="DIR",
                   help="keep greedy references here, per target fingerprint and prompt, so the next evaluation "
                        "of the same target does not decode them again (default: keep none)")
    p.add_argument("--batch", type=int, metavar="N",
                   help="prompts decoded in lockstep, 1..256 (default 16 on a GPU, 1 on a CPU; chains only)")
    p.add_argument("--limit", type=int, default=32, help="prompts evaluated (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=64, help=f"tokens generated per prompt, 1..{MAX_NEW} (default 64)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="compute dtype (default fp32)")
    p.add_argument("--report", type=Path, help="write the figures here as JSON")
    p.add_argument("--concurrency", type=int, default=4, help="--server: requests in flight, 1..64 (default 4)")
    p.add_argument("--timeout", type=float, default=300.0, help="--server: seconds per request (default 300)")
    cpu_threads.add_option(p)
    return p


def parse(argv: Sequence[str] | None = None) -> EvalOptions:
    """The options of a command line; argparse's own errors exit 2 with its usage."""
    return EvalOptions(**vars(build_parser().parse_args(argv)))


def validate(opts: EvalOptions) -> None:
    """BadInput for a combination or a value past its bound; nothing is filled in."""
    if opts.prompts is None and opts.demo_prompts is None:
        raise BadInput(f"give --prompts FILE or --demo-prompts N; see {PROG} --help")
    if opts.server is None and (opts.target is None or (opts.drafter is None and not opts.baseline)):
        raise BadInput("local evaluation needs --target and --drafter, --baseline or both (or pass --server URL)")
    if opts.server is not None and (opts.baseline or opts.no_kv_cache or opts.configs):
        raise BadInput("--baseline, --no-kv-cache and --configs are for local evaluation; drop them with --server")
    if opts.num_steps is not None and not 1 <= opts.num_steps <= MAX_STEPS:
        raise BadInput(f"--num-steps must be between 1 and {MAX_STEPS}, got {opts.num_steps}")
    if not 1 <= opts.max_new_tokens <= MAX_NEW:
        raise BadInput(f"--max-new-tokens must be between 1 and {MAX_NEW}, got {opts.max_new_tokens}")
    if opts.demo_prompts is not None and opts.target is None:
        raise BadInput("--demo-prompts needs --target (its tokenizer renders the chats)")
    if opts.batch is not None and not 1 <= opts.batch <= 256:
        raise BadInput(f"--batch must be between 1 and 256, got {opts.batch}")
    if not 1 <= opts.concurrency <= 64:
        raise BadInput(f"--concurrency must be between 1 and 64, got {opts.concurrency}")
    if not 0 < opts.timeout <= 86400:
        raise BadInput(f"--timeout must be between 0 and 86400 seconds, got {opts.timeout}")
    if not 1 <= opts.max_settings <= 100_000:
        raise BadInput(f"--max-settings must be between 1 and 100000, got {opts.max_settings}")
    if opts.configs is not None:
        _refuse_unbounded(opts, setting_texts(opts.configs))


def setting_texts(configs: list[str]) -> list[str]:
    return " ".join(configs).split()  # one argument may hold several (a config variable)


def _refuse_unbounded(opts: EvalOptions, texts: list[str]) -> None:
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
