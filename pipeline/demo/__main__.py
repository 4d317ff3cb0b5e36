"""Build the demo's inputs offline from a seed: chat datasets, a tokenizer, a trained target.

    python -m pipeline.demo --out DIR [--seed 0] [--train-steps N] [--quick]

Writes DIR/raw/<source>.jsonl, DIR/tokenizer/, DIR/target/ and, last, DIR/assets.json:
its presence means a complete build. Each folder is built under a temporary name and
exchanged into place (pipeline.output_guard), so an interrupted rebuild never leaves half a
target behind, and a failure leaves no temporary. DIR carries the `.eagle3-writer` marker of
pipeline.demo: an existing DIR that is not empty and lacks it (a model folder, a home
directory named by mistake) is refused with exit 2 before anything is touched; a full disk
exits 3 naming the volume and the bytes needed; Ctrl-C exits 130 and SIGTERM 143, leaving no
temporary (pipeline/program_edge.py). Same seed, same
bytes: data and tokenizer are seeded and the target trains on one thread with
deterministic ops.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from pipeline.demo.folder import claim
from pipeline.demo.options import Options, parse
from pipeline.events import EventWriter
from pipeline.program_edge import run_stage


def _run(opts: Options) -> int:
    claim(opts.out)
    started = time.monotonic()
    from pipeline.demo.build import build  # torch and transformers: loaded for a build, not for --help

    with EventWriter.from_env() as events:
        build(opts.out, opts.seed, opts.train_steps, opts.quick, events)
    print(f"demo: done in {time.monotonic() - started:.1f}s -> {opts.out}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    # a stop unwinds through the folder swap, which removes its temporary
    return run_stage("demo", argv, parse, _run)


if __name__ == "__main__":
    sys.exit(main())
