"""`python -m pipeline.regenerate`: the stage's edge and its order of work.

    python -m pipeline.regenerate SOURCE [SOURCE ...] --out OUT.jsonl [--stats STATS.json]
        --backend hf --model TARGET_DIR [--device cpu|cuda] [--dtype bf16|fp16|fp32] [--batch-size N]
        --backend server --server URL [--server URL ...] [--served-model NAME] [--concurrency N]
                 [--timeout S] [--retries N] [--max-consecutive-failures N]
        [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S] [--samples-per-prompt N] [--trim-loops]
        [--limit N]
        [--role-map a=b,...] [--max-invalid SHARE] [--strict]
    python -m pipeline.regenerate --estimate SOURCE ... [--limit N] [--max-new-tokens N] [--json]
    python -m pipeline.regenerate --synthesize N --out OUT.jsonl --model TARGET_DIR ...   (synthesis/synthesize.py:
        records whose questions the target writes too)

Exit codes: 0 done (a record that failed is counted in the stats, not fatal), 1 a bug,
2 bad input, 3 the disk filled, 4 a server died (after --max-consecutive-failures failed
requests in a row, or unreachable at the start) or the run failed as a whole (more than
--max-failed-share of its records failed, or it wrote no record: stats `status: failed`),
130 interrupted, 143 terminated. After any of them the same command resumes: records already
in OUT are kept and not asked again; the failed ones are asked again.
"""

from __future__ import annotations

import sys

from pipeline.program_edge import on_sigterm, run_program
from pipeline.regenerate import options
from pipeline.regenerate.estimate import run as estimate
from pipeline.regenerate.regeneration import NAME, regenerate
from pipeline.regenerate.synthesis.synthesize import body as synthesize

RESUME = "the records written so far are kept; rerun the same command to resume"


def body(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--synthesize" in args or any(a.startswith("--synthesize=") for a in args):
        return synthesize(args)
    if "--estimate" in args:
        return estimate(args)
    opts = options.parse(args)
    opts.validate()
    return regenerate(opts)


def main(argv: list[str] | None = None) -> int:
    # a stop raises Terminated wherever the main thread is; the sink's `finally` flushes what was
    # answered and writes the stats, and the Appender never writes a record twice
    with on_sigterm():
        return run_program(NAME, lambda: body(argv), stop_note=RESUME)


if __name__ == "__main__":
    sys.exit(main())
