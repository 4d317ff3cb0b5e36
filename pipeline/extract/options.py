"""What an extraction is asked for: its command line, and the frozen options it parses into
(every default written once, in `Options`; `validate()` refuses, per mode, what a run cannot
use). Both backends and the store take their settings from the one `Options`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline import cpu_threads
from pipeline.dump_protocol import ERROR_ROOM, dump_room
from pipeline.program_edge import BadInput
from pipeline.sizes import parse_size

PROG = "python -m pipeline.extract"
RESERVE = "10GB"
DUMP_BUDGET = "8GB"
MAX_WRITERS = 64
MAX_CONCURRENCY = 1024
MAX_REQUEST_TIMEOUT = 86400.0


@dataclass(frozen=True)
class Options:
    """The command line's flags, sizes in bytes; `fp8` and `dump_room` are what the store and
    the SGLang client read of them."""

    estimate: bool = False
    verify: bool = False
    sample: int | None = None  # --verify: checksum N random samples and the last N instead of all
    backend: str = "hf"
    model: Path | None = None
    data: Path | None = None
    out: Path | None = None
    stats: Path | None = None
    batch_tokens: int = 16384
    max_len: int | None = None
    writers: int = 4
    queue: int = 4
    reserve: int = parse_size(RESERVE)
    rank: int | None = None  # None: $RANK under torchrun, else 0
    world_size: int | None = None
    device: str | None = None  # None: cuda when available
    no_compile: bool = False
    limit: int | None = None
    window: int = 2048
    store_dtype: str = "bf16"  # fp8: states as e4m3 with scales (pipeline/store/fp8.py)
    dtype: str = "bf16"  # --estimate: bytes per value
    json: bool = False
    threads: int | None = None  # torch's CPU threads (None: pipeline/cpu_threads.py chooses)
    server: str | None = None
    dump_dir: Path | None = None
    dump_budget: int = parse_size(DUMP_BUDGET)
    concurrency: int = 8
    request_timeout: float = 600.0
    retries: int = 3
    max_failures: int = 20

    @property
    def fp8(self) -> bool:
        return self.store_dtype == "fp8"

    @property
    def dump_room(self) -> int:
        """What the dumps may take of --dump-budget (the server keeps room for .error files)."""
        return dump_room(self.dump_budget)

    def validate(self) -> None:
        """BadInput naming the flags a mode needs and lacks, or a value past its bound; nothing is filled in."""
        if self.verify:
            self._need("out")
            if self.sample is not None and self.sample < 1:
                raise BadInput(f"--sample must be at least 1, got {self.sample}")
        elif self.estimate:
            self._need("model", "stats")
        elif self.backend == "sglang":
            self._need("model", "data", "out", "server", "dump_dir", why=" (needed by --backend sglang)")
            self._validate_sglang()
            self._validate_store()
        else:
            self._need("model", "data", "out")
            self._validate_store()

    def _need(self, *names: str, why: str = "") -> None:
        missing = [f"--{n.replace('_', '-')}" for n in names if getattr(self, n) is None]
        if missing:
            raise BadInput(f"missing {', '.join(missing)}{why}; see {PROG} --help")

    def _validate_store(self) -> None:
        for name in ("batch_tokens", "writers", "queue", "window"):
            _at_least(name, getattr(self, name), 1)
        if self.max_len is not None:
            _at_least("max_len", self.max_len, 1)
        if self.limit is not None:
            _at_least("limit", self.limit, 0, "must not be negative")
        _at_least("reserve", self.reserve, 0, "must not be negative")

    def _validate_sglang(self) -> None:
        for name in ("concurrency", "max_failures", "retries", "writers"):
            _at_least(name, getattr(self, name), 1)
        if self.concurrency > MAX_CONCURRENCY:
            raise BadInput(f"--concurrency must be at most {MAX_CONCURRENCY}, got {self.concurrency}")
        if self.writers > MAX_WRITERS:
            raise BadInput(f"--writers must be at most {MAX_WRITERS}, got {self.writers}")
        if not 0 < self.request_timeout <= MAX_REQUEST_TIMEOUT:
            raise BadInput(f"--request-timeout must be between 0 and {MAX_REQUEST_TIMEOUT:g} seconds, got "
                           f"{self.request_timeout:g}")
        if self.dump_room < 1:
            raise BadInput(f"--dump-budget must be more than {ERROR_ROOM} bytes, got {self.dump_budget}")


def _at_least(name: str, value: int, lo: int, says: str = "") -> None:
    if value < lo:
        raise BadInput(f"--{name.replace('_', '-')} {says or f'must be at least {lo}'}, got {value}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Extract EAGLE-3 hidden states from a target model.")
    p.add_argument("--estimate", action="store_true", help="print the bytes a run will write, and exit")
    p.add_argument("--verify", action="store_true",
                   help="check the store at --out (sizes, checksums, completeness; with --model its target) and exit")
    p.add_argument("--sample", type=int, default=Options.sample,
                   help="--verify only: checksum and read N random samples and the last N written instead of all")
    p.add_argument("--backend", default=Options.backend, choices=["hf", "sglang"],
                   help="capture backend (default hf: transformers; sglang: a patched SGLang server, see sglang_client.py)")
    p.add_argument("--model", type=Path, help="target model folder (save_pretrained layout)")
    p.add_argument("--data", type=Path, help="merged dataset (JSONL)")
    p.add_argument("--out", type=Path, help="store folder")
    p.add_argument("--stats", type=Path, help="merge stats JSON (its dataset_sha256 is checked against --data, "
                   "its tokenizer_identity against --model's tokenizer)")
    p.add_argument("--batch-tokens", type=int, default=Options.batch_tokens,
                   help=f"padded tokens per forward (default {Options.batch_tokens})")
    p.add_argument("--max-len", type=int, default=Options.max_len, help="truncate samples to this many tokens")
    p.add_argument("--writers", type=int, default=Options.writers,
                   help=f"concurrent store writes (default {Options.writers}): writer threads for the HF backend, "
                        "write slots for the SGLang client")
    p.add_argument("--queue", type=int, default=Options.queue,
                   help=f"captured batches held in host memory awaiting writes (default {Options.queue}); "
                        "host memory is about queue x batch-tokens x 4 x hidden x dtype bytes")
    p.add_argument("--reserve", default=RESERVE,
                   help=f"stop cleanly when free space would drop below this (default {RESERVE})")
    p.add_argument("--rank", type=int, default=Options.rank, help="this process's shard (default: $RANK under torchrun, else 0)")
    p.add_argument("--world-size", type=int, default=Options.world_size, help="number of shards (default: $WORLD_SIZE, else 1)")
    p.add_argument("--device", default=Options.device, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-compile", action="store_true",
                   help="do not torch.compile the decoder layers (compiled by default on CUDA, never on CPU)")
    p.add_argument("--limit", type=int, default=Options.limit, help="extract only the first N samples of the dataset")
    p.add_argument("--window", type=int, default=Options.window,
                   help=f"samples sorted together by length (default {Options.window})")
    p.add_argument("--store-dtype", default=Options.store_dtype, choices=["bf16", "fp8"],
                   help="what the store holds: bf16 (default) the states in the target's own dtype (bf16 on CUDA; "
                        "fp32 on CPU runs); fp8 float8 e4m3 with a float32 scale per token (aux: per token per "
                        "capture layer), about half the bytes; training dequantizes on read. Also for --estimate")
    p.add_argument("--dtype", default=Options.dtype, help="--estimate only: bytes per value (bf16, fp16, fp32)")
    p.add_argument("--json", action="store_true", help="--estimate, --verify: print a JSON object")
    cpu_threads.add_option(p)
    s = p.add_argument_group("--backend sglang")
    s.add_argument("--server", help="the extraction-mode server's URL, e.g. http://127.0.0.1:30000")
    s.add_argument("--dump-dir", type=Path, help="the server's dump folder (its EAGLE3_DUMP_DIR)")
    s.add_argument("--dump-budget", default=DUMP_BUDGET, help="bytes the dump folder may hold: the server's "
                   f"EAGLE3_DUMP_BUDGET (default {DUMP_BUDGET}); requests are held back to stay under it")
    s.add_argument("--concurrency", type=int, default=Options.concurrency,
                   help=f"requests in flight (default {Options.concurrency})")
    s.add_argument("--request-timeout", type=float, default=Options.request_timeout,
                   help=f"seconds one request may take, answer and dump included (default {Options.request_timeout:g})")
    s.add_argument("--retries", type=int, default=Options.retries, help=f"attempts per sample (default {Options.retries})")
    s.add_argument("--max-failures", type=int, default=Options.max_failures,
                   help="failed attempts in a row that mean the server is dead: stop with exit 4 "
                   f"(default {Options.max_failures})")
    return p


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line, its sizes in bytes (BadInput naming a flag that is not
    one); argparse's own errors exit 2 with its usage."""
    fields_ = vars(build_parser().parse_args(argv))
    for name in ("reserve", "dump_budget"):
        try:
            fields_[name] = parse_size(fields_[name])
        except ValueError as e:
            raise BadInput(f"--{name.replace('_', '-')}: {e}") from None
    return Options(**fields_)
