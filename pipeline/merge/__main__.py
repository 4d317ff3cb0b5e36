"""Merge chat datasets into one shuffled, tokenized training set with assistant-only masks.

    python -m pipeline.merge --tokenizer PATH --out OUT.jsonl [--stats STATS.json]
        [--max-len 512] [--on-long truncate|drop] [--seed 0] [--include SRC ...]
        [--exclude SRC ...] [--workers N] [--strict] [--max-invalid SHARE]
        [--role-map NAME=ROLE,...] [--on-assistant-first keep|drop] [--same-role join|drop]
        SOURCE.jsonl|SOURCE.json|DIR ...

Each record is rendered with the target's own chat template (the drafter must see exactly
the token stream the target serves), masked to the assistant's text, and cut or dropped
at --max-len. Tokenizing runs in worker processes over fixed chunks; the shuffle uses only
the seed and the input order, so the output is byte-identical for any --workers. Output
and stats are written to temporary names and renamed; the stats carry the dataset's
sha256, so a kill between the two renames (new dataset, old stats) is caught by a verify
that compares them (and the old stats are removed first, so it can only read as missing).
Temporary files of a merge that was killed are removed by the next run; SIGTERM removes
its own.

Sources are read by `pipeline.chat.sources` (JSON lines or a streamed JSON array, in the
shapes `pipeline.chat.records` accepts): an unusable record is skipped and counted by reason,
a source past --max-invalid stops the merge, --strict stops at the first bad record. The
parent reads; workers tokenize chunks of records. A record with more text than --max-len
tokens could hold is dropped (or cut) before tokenizing, and a line over the line bound
is skipped unread; both are counted and reported.

Exit codes: 0 ok, 2 bad arguments or input (one line naming file, line and field, or the
source and its share of unusable records), 1 any other failure, 130 interrupted, 143
stopped by SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence

from pipeline.events import EventWriter
from pipeline.merge.merging import merge
from pipeline.merge.options import parse
from pipeline.program_edge import StageError, on_sigterm, run_program


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()

    def body() -> int:
        opts = parse(argv)
        opts.validate()
        try:
            with EventWriter.from_env() as events:
                merge(opts, events)
        except MemoryError:
            raise StageError("out of memory; lower --max-len or --max-line-bytes, or use fewer --workers") from None
        print(f"merge: wrote {opts.out} in {time.monotonic() - started:.1f}s", flush=True)
        return 0

    # SIGTERM and Ctrl-C unwind through merge's `finally`, so its temporary files go with it; a
    # forked tokenizer worker signalled before init_worker resets the handlers ends quietly
    with on_sigterm(signals=(signal.SIGTERM, signal.SIGINT)):
        return run_program("merge", body, stop_note="temporary files removed")


if __name__ == "__main__":
    sys.exit(main())
