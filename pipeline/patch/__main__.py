"""`python -m pipeline.patch apply|verify|revert|status --file PATH | --module NAME`
(exit codes in pipeline/patch/__init__.py)."""

from __future__ import annotations

import sys

from pipeline.patch import patcher
from pipeline.patch.options import parse
from pipeline.patch.patcher import EXIT_NOT_PATCHED, EXIT_OK
from pipeline.program_edge import on_sigterm, run_program


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)

    def body() -> int:
        path = args.file if args.file is not None else patcher.module_file(args.module or "")  # argparse: one of them
        if args.action == "status":
            print(patcher.status(path).describe(path))
            return EXIT_OK
        if args.action == "verify":
            ok, line = patcher.verify(path)
            print(line)
            return EXIT_OK if ok else EXIT_NOT_PATCHED
        print(patcher.apply(path) if args.action == "apply" else patcher.revert(path))
        return EXIT_OK

    # a stop unwinds through the lock's release and the atomic write's cleanup
    with on_sigterm():
        return run_program("patch", body)


if __name__ == "__main__":
    sys.exit(main())
