"""What an extraction is asked for: its command line, and the store-side options both backends
take from it (the sglang backend's own are sglang_client.SGLangOptions)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from pipeline import cpu_threads
from pipeline.program_edge import BadInput
from pipeline.sizes import parse_size

PROG = "python -m pipeline.extract"
RESERVE = "10GB"


@dataclass(frozen=True)
class Options:
    """The store-side options both backends take from the command line."""

    data: Path
    out: Path
    stats: Path | None = None
    batch_tokens: int = 16384
    max_len: int | None = None
    writers: int = 4
    queue: int = 4
    reserve: int = parse_size(RESERVE)
    limit: int | None = None
    window: int = 2048
    fp8: bool = False  # --store-dtype fp8: states as e4m3 with scales (pipeline/store/fp8.py)

    def validate(self) -> None:
        for name in ("batch_tokens", "writers", "queue", "window"):
            if getattr(self, name) < 1:
                raise BadInput(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_len is not None and self.max_len < 1:
            raise BadInput(f"--max-len must be at least 1, got {self.max_len}")
        if self.limit is not None and self.limit < 0:
            raise BadInput(f"--limit must not be negative, got {self.limit}")
        if self.reserve < 0:
            raise BadInput(f"--reserve must not be negative, got {self.reserve}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Extract EAGLE-3 hidden states from a target model.")
    p.add_argument("--estimate", action="store_true", help="print the bytes a run will write, and exit")
    p.add_argument("--verify", action="store_true",
                   help="check the store at --out (sizes, checksums, completeness; with --model its target) and exit")
    p.add_argument("--sample", type=int, default=None,
                   help="--verify only: checksum and read N random samples and the last N written instead of all")
    p.add_argument("--backend", default="hf", choices=["hf", "sglang"],
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
    p.add_argument("--rank", type=int, default=None, help="this process's shard (default: $RANK under torchrun, else 0)")
    p.add_argument("--world-size", type=int, default=None, help="number of shards (default: $WORLD_SIZE, else 1)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-compile", action="store_true",
                   help="do not torch.compile the decoder layers (compiled by default on CUDA, never on CPU)")
    p.add_argument("--limit", type=int, default=Options.limit, help="extract only the first N samples of the dataset")
    p.add_argument("--window", type=int, default=Options.window,
                   help=f"samples sorted together by length (default {Options.window})")
    p.add_argument("--store-dtype", default="bf16", choices=["bf16", "fp8"],
                   help="what the store holds: bf16 (default) the states in the target's own dtype (bf16 on CUDA; "
                        "fp32 on CPU runs); fp8 float8 e4m3 with a float32 scale per token (aux: per token per "
                        "capture layer), about half the bytes; training dequantizes on read. Also for --estimate")
    p.add_argument("--dtype", default="bf16", help="--estimate only: bytes per value (bf16, fp16, fp32)")
    p.add_argument("--json", action="store_true", help="--estimate, --verify: print a JSON object")
    cpu_threads.add_option(p)
    s = p.add_argument_group("--backend sglang")
    s.add_argument("--server", help="the extraction-mode server's URL, e.g. http://127.0.0.1:30000")
    s.add_argument("--dump-dir", type=Path, help="the server's dump folder (its EAGLE3_DUMP_DIR)")
    s.add_argument("--dump-budget", default="8GB", help="bytes the dump folder may hold: the server's "
                   "EAGLE3_DUMP_BUDGET (default 8GB); requests are held back to stay under it")
    s.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    s.add_argument("--request-timeout", type=float, default=600.0,
                   help="seconds one request may take, answer and dump included (default 600)")
    s.add_argument("--retries", type=int, default=3, help="attempts per sample (default 3)")
    s.add_argument("--max-failures", type=int, default=20,
                   help="failed attempts in a row that mean the server is dead: stop with exit 4 (default 20)")
    return p


def size_flag(args: argparse.Namespace, name: str) -> int:
    """The bytes a size flag ("10GB" style) says; BadInput naming the flag."""
    try:
        return parse_size(getattr(args, name))
    except ValueError as e:
        raise BadInput(f"--{name.replace('_', '-')}: {e}") from None


def options_from(args: argparse.Namespace) -> Options:
    """The store-side options both backends take from the command line, validated."""
    options = Options(data=args.data, out=args.out, stats=args.stats, batch_tokens=args.batch_tokens,
                             max_len=args.max_len, writers=args.writers, queue=args.queue,
                             reserve=size_flag(args, "reserve"), limit=args.limit, window=args.window,
                             fp8=args.store_dtype == "fp8")
    options.validate()
    return options
