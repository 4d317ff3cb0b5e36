"""Does the SGLang client's per-chunk work scale over its writer threads? Each writer checks a
dump's chunk for NaN/Inf and hashes it (xxh3) before writing it; the work is numpy and xxhash
calls that run without the GIL, but every call gives the GIL up and takes it back, and with a
dozen threads those hand-overs can set the pace. This measures GB/s through the check alone,
the checksum alone and both, on 1 to 12 threads, for two chunk sizes, with the former check
(a masked copy through a 256 KB scratch, eight numpy calls a megabyte) beside the current one
(pipeline.extract.dumps: two reductions a chunk). Memory only: no disk, no server.

    python bench/dump_check_threads.py [--mb 256] [--threads 1,2,4,8,12] [--chunks 1M,4M]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np
import xxhash

from pipeline.extract import dumps
from pipeline.sizes import format_bytes, parse_size


def former_finite(raw: np.ndarray, scratch: np.ndarray) -> bool:
    for start in range(0, raw.size, scratch.size):
        part = raw[start:start + scratch.size].view(np.int16)
        out = scratch[: part.nbytes].view(np.int16)
        np.bitwise_and(part, 0x7FFF, out=out)
        if out.max() >= 0x7F80:
            return False
    return True


def through(kind: str, src: np.ndarray, chunk: int, threads: int) -> float:
    """GB/s of `kind` over `src` on each of `threads` threads at once, best of three."""
    def body() -> None:
        scratch = np.empty(1 << 18, dtype=np.uint8)
        h = xxhash.xxh3_64()
        for off in range(0, src.size, chunk):
            part = src[off:off + chunk]
            if kind in ("former check", "former check + xxh3") and not former_finite(part, scratch):
                raise AssertionError("finite data judged non-finite")
            if kind in ("check", "check + xxh3") and not dumps._finite(part, "bfloat16"):
                raise AssertionError("finite data judged non-finite")
            if kind.endswith("xxh3"):
                h.update(part)

    best = float("inf")
    for _ in range(3):
        workers = [threading.Thread(target=body) for _ in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t0)
    return threads * src.nbytes / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=256, help="MB each thread works through")
    p.add_argument("--threads", default="1,2,4,8,12")
    p.add_argument("--chunks", default="1M,4M")
    args = p.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    chunks = [parse_size(c) for c in args.chunks.split(",")]
    src = np.random.default_rng(0).integers(0, 0x3F00, size=args.mb * 500_000, dtype=np.int16).view(np.uint8)
    print(f"{format_bytes(src.nbytes)} of finite bf16 bits per thread; GB/s over all threads, best of 3", flush=True)
    for kind in ("former check", "check", "xxh3", "former check + xxh3", "check + xxh3"):
        for chunk in chunks:
            row = " | ".join(f"{n} thr {through(kind, src, chunk, n):6.2f}" for n in counts)
            print(f"{kind:>20}, {chunk >> 10:>5} KB chunks: {row}", flush=True)


if __name__ == "__main__":
    main()
