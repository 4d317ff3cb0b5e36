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

from pipeline import output_guard
from pipeline.demo.folder import WRITER, adopt_legacy
from pipeline.demo.options import parse
from pipeline.events import EventWriter
from pipeline.program_edge import BadInput, on_sigterm, run_program


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = parse(argv)
        if args.out.exists() and not args.out.is_dir():
            raise BadInput(f"--out {args.out} exists and is not a folder; pass a folder path")
        adopt_legacy(args.out)
        output_guard.refuse_foreign(args.out, WRITER)
        started = time.monotonic()
        from pipeline.demo.build import build  # torch and transformers: loaded for a build, not for --help

        with EventWriter.from_env() as events:
            build(args.out, args.seed, args.train_steps, args.quick, events)
        print(f"demo: done in {time.monotonic() - started:.1f}s -> {args.out}", flush=True)
        return 0

    # a stop unwinds through the folder swap, which removes its temporary
    with on_sigterm():
        return run_program("demo", body)


if __name__ == "__main__":
    sys.exit(main())
