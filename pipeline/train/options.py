"""What one training run is asked to do, and the bounds every value is held to before anything
is read: a typo in a flag costs a message, not a loaded target and a failed first step."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path

from pipeline import cpu_threads
from pipeline.train.errors import BadInput

PROG = "python -m pipeline.train"

MAX_STEPS = 100_000_000
DEFAULT_BATCH_TOKENS = 16384
NEEDS_OUT = "--out is required to train (only --estimate runs without it)"
DEFAULT_VAL_MAX = 256
"""--val-share's slice is capped at this many samples (an explicit --val-samples is not): each validation
reads its samples from the store, 50 MB apiece for an 8B target at 2048 tokens."""


@dataclass(frozen=True)
class Options:
    """A run's options: each default written here once (the command line's parser takes them from
    here). `resolved()` settles the ones that depend on others; `validate()` only checks."""

    target: Path
    out: Path | None = None  # None only with --estimate (parse refuses a run without it)
    store: Path | None = None
    data: Path | None = None  # online: the merged dataset; the target computes the states
    draft_vocab: int = 32000
    ttt_length: int = 7
    lr: float = 1e-4
    epochs: int | None = None
    steps: int | None = None
    batch_tokens: int | None = None
    batch_size: int | None = None
    max_len: int = 2048
    seed: int = 0
    warmup_ratio: float = 0.02
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 0.5
    save_every: int = 1000
    keep_last: int = 3
    log_every: int = 10
    workers: int = 2
    prefetch: int = 4
    resume: bool = False
    overwrite: bool = False
    device: str | None = None
    checksums: str = "sample"
    init_head: str = "target"
    val_share: float = 0.02
    val_samples: int | None = None
    val_every: int | None = None
    vocab_data: str | None = None
    stats: str | None = None  # online: merge's stats of --data ("none": its tokenizer unchecked)
    compile_target: bool | None = None  # online: torch.compile the target's layers (None: on CUDA)
    compile_loss: bool | None = None  # torch.compile the objective's vocabulary-wide passes (None: on CUDA)
    gpu_memory_share: float | None = None  # the most of its GPU this process's allocator may hold
    threads: int | None = None  # torch's CPU threads (pipeline/cpu_threads.py: None chooses)
    estimate: bool = False  # print the GPU memory a run of these settings needs, and train nothing
    json: bool = False  # --estimate: as a JSON object

    @property
    def online(self) -> bool:
        return self.data is not None

    def resolved(self) -> Options:
        """The options a run trains with: one epoch when neither --epochs nor --steps is given,
        DEFAULT_BATCH_TOKENS when neither --batch-tokens nor --batch-size is."""
        return replace(self, epochs=1 if self.epochs is None and self.steps is None else self.epochs,
                       batch_tokens=(DEFAULT_BATCH_TOKENS if self.batch_tokens is None and self.batch_size is None
                                     else self.batch_tokens))

    def validate(self) -> None:
        if self.out is None:
            raise BadInput(NEEDS_OUT)
        if (self.store is None) == (self.data is None):
            raise BadInput("pass one of --store STORE (offline: a hidden-state store) or --data MERGED.jsonl "
                           "(online: the target computes the states while the drafter trains)")
        if self.batch_tokens is not None and self.batch_size is not None:
            raise BadInput("--batch-tokens and --batch-size exclude each other; pass one")
        for name, lo, hi in _BOUNDS:
            v = getattr(self, name)
            if v is not None and not lo <= v <= hi:
                raise BadInput(f"--{name.replace('_', '-')} {v}: must be in {lo}..{hi}")
        if self.batch_tokens is not None and self.batch_tokens < self.max_len:
            raise BadInput(f"--batch-tokens {self.batch_tokens} is below --max-len {self.max_len}: a long sample "
                           "would not fit; raise --batch-tokens or lower --max-len")
        if self.init_head not in ("target", "random"):
            raise BadInput(f"--init-head {self.init_head!r}: use target or random")
        if self.checksums not in ("all", "sample", "none"):
            raise BadInput(f"--checksums {self.checksums!r}: use all, sample or none")
        if self.stats is not None and not self.online:
            raise BadInput("--stats is merge's stats of --data, for online training; a store carries its own meta.json")
        if self.online and self.vocab_data == "store":
            raise BadInput("--vocab-data store: an online run has no store; leave --vocab-data out (the draft "
                           "vocabulary is chosen over --data) or name a merged JSONL")


_BOUNDS = (
    ("draft_vocab", 1, 4_000_000), ("ttt_length", 1, 32), ("lr", 1e-8, 1.0), ("epochs", 1, 10_000),
    ("steps", 1, MAX_STEPS), ("batch_tokens", 1, 1 << 24), ("batch_size", 1, 1 << 16), ("max_len", 2, 1 << 20),
    ("warmup_ratio", 0.0, 1.0), ("min_lr_ratio", 0.0, 1.0), ("weight_decay", 0.0, 10.0),
    ("max_grad_norm", 0.0, 1e6), ("save_every", 1, MAX_STEPS), ("keep_last", 1, 10_000),
    ("log_every", 1, MAX_STEPS), ("workers", 0, 64), ("prefetch", 1, 64), ("val_share", 0.0, 0.5),
    ("val_samples", 0, MAX_STEPS), ("val_every", 1, MAX_STEPS), ("gpu_memory_share", 0.02, 1.0),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Train an EAGLE-3 drafter on a hidden-state store (offline) "
                                "or on the merged dataset, the target computing the states as it goes (online).")
    p.set_defaults(**{f.name: f.default for f in fields(Options) if f.default is not MISSING})
    src = p.add_mutually_exclusive_group()
    src.add_argument("--store", type=Path, help="offline: hidden-state store (pipeline.extract --out)")
    src.add_argument("--data", type=Path, help="online: merged JSONL (pipeline.merge --out); the target "
                     "is loaded on each rank's device and nothing is written to disk")
    p.add_argument("--target", type=Path, required=True, help="target model folder (config.json + safetensors)")
    p.add_argument("--out", type=Path, help="run folder: checkpoints, summary.json (required to train)")
    p.add_argument("--estimate", action="store_true", help="print the GPU memory a run of these settings needs "
                   "(target, drafter, optimiser, one batch's activations) and exit")
    p.add_argument("--json", action="store_true", help="--estimate: print a JSON object")
    p.add_argument("--no-compile-target", dest="compile_target", action="store_const", const=False, default=None,
                   help="online: run the target's layers eagerly (default: torch.compile on CUDA)")
    p.add_argument("--no-compile-loss", dest="compile_loss", action="store_const", const=False, default=None,
                   help="run the drafter's step eagerly: the objective's passes over the vocabulary, the TTT "
                   "attention's merge, the layer around it (default: torch.compile on CUDA)")
    p.add_argument("--draft-vocab", type=int, help="draft vocabulary size (default %(default)s, capped at "
                   "the target's)")
    p.add_argument("--ttt-length", type=int, help="training-time-test steps (default %(default)s)")
    p.add_argument("--lr", type=float, help="peak learning rate (default %(default)g)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=int, help="passes over the store (default 1)")
    g.add_argument("--steps", type=int, help="optimiser steps instead of epochs")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--batch-tokens", type=int,
                   help=f"padded tokens per rank per step (default {DEFAULT_BATCH_TOKENS}); samples of similar length batch together")
    b.add_argument("--batch-size", type=int, help="samples per rank per step instead")
    p.add_argument("--max-len", type=int, help="cut samples to this many tokens (default %(default)s)")
    p.add_argument("--seed", type=int, help="model init and data order (default %(default)s)")
    p.add_argument("--warmup-ratio", type=float, help="share of steps in linear warmup (default %(default)g)")
    p.add_argument("--min-lr-ratio", type=float, help="cosine floor as a share of --lr (default %(default)g)")
    p.add_argument("--weight-decay", type=float, help="AdamW weight decay (default %(default)g)")
    p.add_argument("--max-grad-norm", type=float, help="gradient clipping, 0 for none (default %(default)g)")
    p.add_argument("--save-every", type=int, help="checkpoint every N steps and at the end (default %(default)s)")
    p.add_argument("--keep-last", type=int, help="checkpoints kept (default %(default)s)")
    p.add_argument("--log-every", type=int, help="log and emit metrics every N steps (default %(default)s)")
    p.add_argument("--workers", type=int, help="data loader processes per rank (default %(default)s)")
    p.add_argument("--prefetch", type=int, help="batches each loader process reads ahead (default %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint "
                   "(starts fresh when there is none)")
    p.add_argument("--overwrite", action="store_true", help="delete the checkpoints in --out and start over")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available; rank's LOCAL_RANK GPU)")
    p.add_argument("--gpu-memory-share", type=float, help="the most of its GPU this process may hold, "
                   "0.02-1 (default: all): for several trainers on one GPU, whose caching allocators would otherwise "
                   "each keep what they once used and starve the others")
    p.add_argument("--checksums", choices=["all", "sample", "none"],
                   help="store files whose checksum is verified before training (default %(default)s)")
    p.add_argument("--init-head", choices=["target", "random"],
                   help="start the drafter's lm_head from the target's rows of the draft vocabulary (default)")
    v = p.add_mutually_exclusive_group()
    v.add_argument("--val-share", type=float,
                   help=f"share of the store held out for validation, never trained on (default %(default)g, at most {DEFAULT_VAL_MAX} "
                        "samples; 0 for none)")
    v.add_argument("--val-samples", type=int, help="held-out validation samples instead of a share")
    p.add_argument("--val-every", type=int, help="validate every N steps and at the end "
                   "(default: --save-every)")
    p.add_argument("--vocab-data", help="merged JSONL to choose the draft vocabulary over (default: "
                   "the store's meta.json dataset when it is there unchanged; 'store' for the store's samples)")
    p.add_argument("--stats", metavar="STATS.json|none",
                   help="online: merge's stats of --data (default: <data stem>.stats.json beside it); the tokenizer "
                        "they record must be the target's. 'none' trains without that check")
    cpu_threads.add_option(p)
    return p


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line; argparse's own errors exit 2 with its usage, as does a run
    to train without --out."""
    p = build_parser()
    opts = Options(**vars(p.parse_args(argv)))
    if opts.out is None and not opts.estimate:
        p.error(NEEDS_OUT)
    return opts
