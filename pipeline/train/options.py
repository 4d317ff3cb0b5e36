"""What one training run is asked to do, and the bounds every value is held to before anything
is read: a typo in a flag costs a message, not a loaded target and a failed first step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput

MAX_STEPS = 100_000_000
DEFAULT_BATCH_TOKENS = 16384
DEFAULT_VAL_MAX = 256
"""--val-share's slice is capped at this many samples (an explicit --val-samples is not): each validation
reads its samples from the store, 50 MB apiece for an 8B target at 2048 tokens."""


@dataclass
class Options:
    target: Path
    out: Path
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

    @property
    def online(self) -> bool:
        return self.data is not None

    def validate(self) -> None:
        if (self.store is None) == (self.data is None):
            raise BadInput("pass one of --store STORE (offline: a hidden-state store) or --data MERGED.jsonl "
                           "(online: the target computes the states while the drafter trains)")
        if self.epochs is None and self.steps is None:
            self.epochs = 1
        if self.batch_tokens is None and self.batch_size is None:
            self.batch_tokens = DEFAULT_BATCH_TOKENS
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
