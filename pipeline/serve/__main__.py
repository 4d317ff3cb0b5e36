"""`python -m pipeline.serve`: an SGLang server for a `service` phase, in one of two modes.

    python -m pipeline.serve --mode extract --model TARGET --dump-dir /dev/shm/sglang_hs \\
        [--dump-budget 32GB] [--tp 8] [--mem-fraction 0.85] [--host 127.0.0.1] [--port 30000] [-- EXTRA...]
    python -m pipeline.serve --mode eagle3 --model TARGET --draft DRAFTER \\
        [--num-steps 3] [--topk 1] [--num-draft-tokens 4] [--tp 8] [... ] [-- EXTRA...]
    python -m pipeline.serve --mode normal --model TARGET [--tp 8] [...] [-- EXTRA...]
    ... --dry-run    print the command and environment instead of starting the server

It builds the `python -m sglang.launch_server` command and replaces itself with it
(os.execvpe), so the pid the run directory records is the server's, and stopping the phase
(SIGTERM, then SIGKILL, to the process group) stops the server and its TP workers. Run it with
the interpreter of the environment SGLang is installed in (the config's `python:`).

Extraction mode: the patched model (`python -m pipeline.patch apply`) dumps each request's
hidden states into --dump-dir (pipeline/patch/sglang_dump.py; the client is
`python -m pipeline.extract --backend sglang`). The server gets EAGLE3_DUMP_DIR and
EAGLE3_DUMP_BUDGET (and EAGLE3_DUMP_WAIT with --dump-wait) and the flags the dump needs,
checked against SGLang 0.5.23's server_args (sglang/srt/arg_groups/fields/*.py):
  --disable-radix-cache                     no prefix-cache hits: every token is computed
  --chunked-prefill-size -1                 a request is never split over two prefills
  --cuda-graph-backend-prefill disabled     a replayed graph would skip the dump hook
  --cuda-graph-backend-decode disabled      max_new_tokens 1 never decodes: skip the capture
The capture layers are not a flag: the patched model calls its own
`set_eagle3_layers_to_capture()` when EAGLE3_DUMP_DIR is set.

Normal mode: the target alone, as any SGLang server, for `python -m pipeline.regenerate
--backend server` (its /v1/models lists --model as written); no dump, no drafter.

EAGLE3 mode: `--speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT
--speculative-num-steps K --speculative-eagle-topk T --speculative-num-draft-tokens N`, and
EAGLE3_DUMP_DIR removed from the environment (a patched install must not dump while serving).

The server binds 127.0.0.1 unless --host says otherwise. The checkout holding this package is
put on PYTHONPATH, so the patched model's `from pipeline.patch import sglang_dump` resolves in the
server and its worker processes.

Exit codes (only when it does not exec): 0 --dry-run printed, 2 bad input (a missing model
or drafter folder, a dump budget larger than the dump volume's free space, a flag this
program sets repeated after --), 1 the exec itself failed, 130 interrupted, 143 stopped by SIGTERM
(pipeline/program_edge.py; after the exec the server's own signal handling applies).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from pipeline.program_edge import StageError, run_stage
from pipeline.serve.command import DUMP_ENV, build
from pipeline.serve.options import Options, parse


def _run(opts: Options) -> int:
    cmd, env = build(opts, dict(os.environ))
    added = {k: v for k, v in env.items() if os.environ.get(k) != v}
    removed = sorted(k for k in DUMP_ENV if k in os.environ and k not in env)
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(added.items()))
    if opts.dry_run:
        if removed:
            print(f"unset {' '.join(removed)}")
        print(f"{shown} {shlex.join(cmd)}".strip())
        return 0
    if opts.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"serve: binding {opts.host}: the server is reachable from other machines", flush=True)
    print(f"serve: {opts.mode} mode: exec {shown} {shlex.join(cmd)}".rstrip(), flush=True)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        raise StageError(f"cannot start {cmd[0]}: {e.strerror or e}") from None
    return 1  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    # until the exec, a stop ends serve here; after it the server handles its own signals
    return run_stage("serve", argv, parse, _run)


if __name__ == "__main__":
    sys.exit(main())
