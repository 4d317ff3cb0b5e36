"""The SGLang server's command line and environment for a mode, every flag checked first."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.program_edge import BadInput
from pipeline.serve.options import PROG, Options
from pipeline.sizes import format_bytes, parse_size

CHECKOUT = Path(__file__).resolve().parents[2]
DUMP_ENV = ("EAGLE3_DUMP_DIR", "EAGLE3_DUMP_BUDGET", "EAGLE3_DUMP_WAIT")
MAX_TP = 64
MAX_WAIT = 3600.0
EXTRACT_FLAGS = ["--disable-radix-cache", "--chunked-prefill-size", "-1",
                 "--cuda-graph-backend-prefill", "disabled", "--cuda-graph-backend-decode", "disabled"]


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


def build(args: Options, extra: list[str], environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
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
