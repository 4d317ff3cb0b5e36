"""The SGLang server's command line and environment for a mode, every flag checked first."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.program_edge import BadInput
from pipeline.serve.options import PROG, Options
from pipeline.sizes import format_bytes

CHECKOUT = Path(__file__).resolve().parents[2]
DUMP_ENV = ("EAGLE3_DUMP_DIR", "EAGLE3_DUMP_BUDGET", "EAGLE3_DUMP_WAIT")
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


def build(opts: Options, environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The server's argv and its whole environment, for options `validate()` passed; BadInput for
    a folder that is not a model, a dump budget its volume cannot hold, or a flag after `--`
    that this program sets."""
    model = _model_dir(opts.model, "--model")
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(opts.tp),
            "--host", opts.host, "--port", str(opts.port)]
    if opts.mem_fraction is not None:
        argv += ["--mem-fraction-static", str(opts.mem_fraction)]
    env = {k: v for k, v in environ.items() if k not in DUMP_ENV}
    if opts.mode == "extract":
        argv += EXTRACT_FLAGS
        env.update(_dump_env(opts))
    elif opts.mode == "eagle3":
        assert opts.draft is not None  # Options.validate: --mode eagle3 needs --draft
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", _model_dir(opts.draft, "--draft"),
                 "--speculative-num-steps", str(opts.num_steps), "--speculative-eagle-topk", str(opts.topk),
                 "--speculative-num-draft-tokens", str(opts.num_draft_tokens)]
    clash = sorted(_ours(argv) & {a.split("=", 1)[0] for a in opts.extra})
    if clash:
        raise BadInput(f"{', '.join(clash)} after -- is set by {PROG} itself; use its own option instead")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CHECKOUT) not in paths:
        env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), *paths])
    return argv + list(opts.extra), env


def _dump_env(opts: Options) -> dict[str, str]:
    """What the patched model reads: the dump folder, its budget (which its volume must hold), the wait."""
    assert opts.dump_dir is not None  # Options.validate: --mode extract needs --dump-dir
    budget = opts.dump_budget_bytes
    volume, free = _free_bytes(opts.dump_dir)
    room = free + _folder_bytes(opts.dump_dir)
    if budget > room:
        raise BadInput(f"--dump-budget {opts.dump_budget} ({format_bytes(budget)}) is more than {volume} can hold "
                       f"for {opts.dump_dir}: {format_bytes(room)} free; lower the budget or free space there")
    env = {"EAGLE3_DUMP_DIR": os.path.abspath(opts.dump_dir), "EAGLE3_DUMP_BUDGET": str(budget)}
    if opts.dump_wait is not None:
        env["EAGLE3_DUMP_WAIT"] = f"{opts.dump_wait:g}"
    return env
