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
hidden states into --dump-dir (pipeline/sglang_dump.py; the client is
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
put on PYTHONPATH, so the patched model's `from pipeline import sglang_dump` resolves in the
server and its worker processes.

Exit codes (only when it does not exec): 0 --dry-run printed, 2 bad input (a missing model
or drafter folder, a dump budget larger than the dump volume's free space, a flag this
program sets repeated after --), 1 the exec itself failed, 130 interrupted, 143 stopped by SIGTERM
(pipeline/program_edge.py; after the exec the server's own signal handling applies).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.program_edge import BadInput, StageError, on_sigterm, run_program
from pipeline.sizes import format_bytes, parse_size

PROG = "python -m pipeline.serve"
CHECKOUT = Path(__file__).resolve().parents[1]
DUMP_ENV = ("EAGLE3_DUMP_DIR", "EAGLE3_DUMP_BUDGET", "EAGLE3_DUMP_WAIT")
MAX_TP = 64
MAX_WAIT = 3600.0
EXTRACT_FLAGS = ["--disable-radix-cache", "--chunked-prefill-size", "-1",
                 "--cuda-graph-backend-prefill", "disabled", "--cuda-graph-backend-decode", "disabled"]


@dataclass(frozen=True)
class ServeOptions:
    """What the server was asked for: the command line's flags, checked by `build`."""

    mode: str
    model: str
    tp: int = 1
    mem_fraction: float | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    dump_dir: Path | None = None
    dump_budget: str = "8GB"
    dump_wait: float | None = None
    draft: str | None = None
    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4
    dry_run: bool = False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Start an SGLang server for hidden-state extraction or "
                                "EAGLE3 serving (execs python -m sglang.launch_server).")
    p.add_argument("--mode", required=True, choices=["extract", "eagle3", "normal"])
    p.add_argument("--model", required=True, help="target model folder (passed to SGLang as written: /model_info "
                   "reports it, and readiness checks compare it with the config's)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (default 1)")
    p.add_argument("--mem-fraction", type=float, default=None, help="SGLang --mem-fraction-static (0..1)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=30000, help="HTTP port (default 30000)")
    g = p.add_argument_group("extract mode")
    g.add_argument("--dump-dir", type=Path, help="folder the patched model dumps into (e.g. /dev/shm/sglang_hs)")
    g.add_argument("--dump-budget", default="8GB", help="bytes the dump folder may hold (default 8GB)")
    g.add_argument("--dump-wait", type=float, default=None,
                   help="seconds a dump waits for room before the request fails (server default 120)")
    e = p.add_argument_group("eagle3 mode")
    e.add_argument("--draft", help="exported drafter folder (pipeline export)")
    e.add_argument("--num-steps", type=int, default=3, help="--speculative-num-steps (default 3)")
    e.add_argument("--topk", type=int, default=1, help="--speculative-eagle-topk (default 1)")
    e.add_argument("--num-draft-tokens", type=int, default=4, help="--speculative-num-draft-tokens (default 4)")
    p.add_argument("--dry-run", action="store_true", help="print the command and environment, do not start")
    return p


def _model_dir(text: str, flag: str) -> str:
    path = Path(text)
    if not path.is_dir():
        raise BadInput(f"{flag} {path}: no such folder")
    if not (path / "config.json").is_file():
        raise BadInput(f"{flag} {path}: no config.json in it; point {flag} at a save_pretrained folder")
    return text


def _free_bytes(folder: Path) -> tuple[Path, int]:
    p = Path(os.path.abspath(folder))
    while not p.exists():
        p = p.parent
    st = os.statvfs(p)
    return p, st.f_bavail * st.f_frsize


def _folder_bytes(folder: Path) -> int:
    try:
        with os.scandir(folder) as it:
            return sum(e.stat(follow_symlinks=False).st_size for e in it if e.is_file(follow_symlinks=False))
    except OSError:
        return 0


def _ours(argv: list[str]) -> set[str]:
    return {a for a in argv if a.startswith("--")}


def build(args: ServeOptions, extra: list[str], environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The server's argv and its whole environment; raises BadInput."""
    model = _model_dir(args.model, "--model")
    if not 1 <= args.tp <= MAX_TP:
        raise BadInput(f"--tp must be 1..{MAX_TP}, got {args.tp}")
    if not 1 <= args.port <= 65535:
        raise BadInput(f"--port must be 1..65535, got {args.port}")
    if args.mem_fraction is not None and not 0 < args.mem_fraction < 1:
        raise BadInput(f"--mem-fraction must be between 0 and 1, got {args.mem_fraction}")
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(args.tp),
            "--host", args.host, "--port", str(args.port)]
    if args.mem_fraction is not None:
        argv += ["--mem-fraction-static", str(args.mem_fraction)]
    env = {k: v for k, v in environ.items() if k not in DUMP_ENV}
    if args.mode == "extract":
        if args.dump_dir is None:
            raise BadInput("--mode extract needs --dump-dir (e.g. /dev/shm/sglang_hs)")
        if args.draft is not None:
            raise BadInput("--draft is for --mode eagle3; extraction serves the target alone")
        try:
            budget = parse_size(args.dump_budget)
        except ValueError as e:
            raise BadInput(f"--dump-budget: {e}") from None
        if budget <= 0:
            raise BadInput(f"--dump-budget must be more than 0 bytes, got {args.dump_budget!r}")
        volume, free = _free_bytes(args.dump_dir)
        room = free + _folder_bytes(args.dump_dir)
        if budget > room:
            raise BadInput(f"--dump-budget {args.dump_budget} ({format_bytes(budget)}) is more than {volume} can hold "
                           f"for {args.dump_dir}: {format_bytes(room)} free; lower the budget or free space there")
        if args.dump_wait is not None and not 0 <= args.dump_wait <= MAX_WAIT:
            raise BadInput(f"--dump-wait must be 0..{MAX_WAIT:g} seconds, got {args.dump_wait:g}")
        argv += EXTRACT_FLAGS
        env["EAGLE3_DUMP_DIR"] = os.path.abspath(args.dump_dir)
        env["EAGLE3_DUMP_BUDGET"] = str(budget)
        if args.dump_wait is not None:
            env["EAGLE3_DUMP_WAIT"] = f"{args.dump_wait:g}"
    elif args.mode == "normal":
        if args.dump_dir is not None or args.draft is not None:
            raise BadInput("--mode normal serves the target alone: --dump-dir is for --mode extract, --draft for "
                           "--mode eagle3")
    else:
        if args.draft is None:
            raise BadInput("--mode eagle3 needs --draft (the exported drafter folder)")
        draft = _model_dir(args.draft, "--draft")
        for flag, v, lo in (("--num-steps", args.num_steps, 1), ("--topk", args.topk, 1),
                            ("--num-draft-tokens", args.num_draft_tokens, 2)):
            if not lo <= v <= 64:
                raise BadInput(f"{flag} must be {lo}..64, got {v}")
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
                 "--speculative-num-steps", str(args.num_steps), "--speculative-eagle-topk", str(args.topk),
                 "--speculative-num-draft-tokens", str(args.num_draft_tokens)]
    clash = sorted(_ours(argv) & {a.split("=", 1)[0] for a in extra})
    if clash:
        raise BadInput(f"{', '.join(clash)} after -- is set by {PROG} itself; use its own option instead")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CHECKOUT) not in paths:
        env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), *paths])
    return argv + extra, env


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = ServeOptions(**vars(build_parser().parse_args(ours)))

    def body() -> int:
        cmd, env = build(args, extra, dict(os.environ))
        added = {k: v for k, v in env.items() if os.environ.get(k) != v}
        removed = sorted(k for k in DUMP_ENV if k in os.environ and k not in env)
        shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(added.items()))
        if args.dry_run:
            if removed:
                print(f"unset {' '.join(removed)}")
            print(f"{shown} {shlex.join(cmd)}".strip())
            return 0
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"serve: binding {args.host}: the server is reachable from other machines", flush=True)
        print(f"serve: {args.mode} mode: exec {shown} {shlex.join(cmd)}".rstrip(), flush=True)
        try:
            os.execvpe(cmd[0], cmd, env)
        except OSError as e:
            raise StageError(f"cannot start {cmd[0]}: {e.strerror or e}") from None
        return 1  # not reached

    # until the exec, a stop ends serve here; after it the server handles its own signals
    with on_sigterm():
        return run_program("serve", body)


if __name__ == "__main__":
    sys.exit(main())
