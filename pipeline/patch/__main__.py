"""`python -m pipeline.patch apply|verify|revert|status --file PATH | --module NAME`
(exit codes in pipeline/patch/__init__.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipeline.patch import patcher
from pipeline.patch.options import Options, parse
from pipeline.patch.patcher import EXIT_NOT_PATCHED, EXIT_OK
from pipeline.program_edge import run_stage


def _run(opts: Options) -> int:
    path = opts.file if opts.file is not None else patcher.module_file(opts.module or "")  # argparse: one of them
    if opts.action == "status":
        print(patcher.status(path).describe(path))
        return EXIT_OK
    if opts.action == "verify":
        ok, line = patcher.verify(path)
        print(line)
        return EXIT_OK if ok else EXIT_NOT_PATCHED
    print(patcher.apply(path) if opts.action == "apply" else patcher.revert(path))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    # a stop unwinds through the lock's release and the atomic write's cleanup
    return run_stage("patch", argv, parse, _run)


if __name__ == "__main__":
    sys.exit(main())
