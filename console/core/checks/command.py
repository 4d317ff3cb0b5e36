"""command: any program as a check (exit code as expected), run from the config's
folder with the phase's environment, never through a shell."""

from __future__ import annotations

import os
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome
from console.core.checks.subproc import program, run_bounded

TAIL_LINES = 10


def run_command(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    """The message says what happened and the program's last line, its error; the whole
    argv stays in the evidence (quoted for a shell, a `python -c` script reads as noise)."""
    argv, expect, timeout = args["argv"], args["expect"], args["timeout"]
    done = run_bounded(ctx.argv(argv), ctx.root, timeout, env=ctx.env())
    ev: dict[str, Any] = {"argv": argv, "cwd": str(ctx.root), "expected_exit": expect}
    if done.error:
        ev["error"] = done.error
        return Outcome(False, f"{program(argv)}: {done.error}", ev)
    tail = done.tail(TAIL_LINES)
    ev["output_tail"] = tail
    if done.timed_out:
        ev["timed_out_after"] = timeout
        return Outcome(False, f"{program(argv)} did not finish within {timeout:g} s (killed)", ev)
    ev["exit_code"] = done.code
    last = f": {tail[-1].strip()[:160]}" if tail else ""
    if done.code != expect:
        return Outcome(False, f"exited {done.code}, expected {expect}{last}", ev)
    return Outcome(True, f"exited {done.code}{last}", ev)


def _label(a: dict[str, Any]) -> str:
    argv = a["argv"]
    words = [os.path.basename(argv[0]), *argv[1:3]]
    text = " ".join(words)
    return text if len(text) <= 40 else text[:39] + "…"


KINDS = (
    Kind("command",
         {"argv": Field("argv", required=True), "expect": Field("int", default=0),
          "timeout": Field("timeout", default=60.0)},
         run_command, _label, scalar="argv", listed="argv", budget=lambda a: a["timeout"] + 5),
)
