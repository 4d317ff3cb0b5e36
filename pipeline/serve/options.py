"""What a server is asked for: its command line, and the options it parses into."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

PROG = "python -m pipeline.serve"


@dataclass(frozen=True)
class Options:
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
    p.add_argument("--tp", type=int, default=Options.tp, help=f"tensor parallel size (default {Options.tp})")
    p.add_argument("--mem-fraction", type=float, default=None, help="SGLang --mem-fraction-static (0..1)")
    p.add_argument("--host", default=Options.host,
                   help=f"address to bind (default {Options.host}: this machine only)")
    p.add_argument("--port", type=int, default=Options.port, help=f"HTTP port (default {Options.port})")
    g = p.add_argument_group("extract mode")
    g.add_argument("--dump-dir", type=Path, help="folder the patched model dumps into (e.g. /dev/shm/sglang_hs)")
    g.add_argument("--dump-budget", default=Options.dump_budget,
                   help=f"bytes the dump folder may hold (default {Options.dump_budget})")
    g.add_argument("--dump-wait", type=float, default=None,
                   help="seconds a dump waits for room before the request fails (server default 120)")
    e = p.add_argument_group("eagle3 mode")
    e.add_argument("--draft", help="exported drafter folder (pipeline export)")
    e.add_argument("--num-steps", type=int, default=Options.num_steps,
                   help=f"--speculative-num-steps (default {Options.num_steps})")
    e.add_argument("--topk", type=int, default=Options.topk, help=f"--speculative-eagle-topk (default {Options.topk})")
    e.add_argument("--num-draft-tokens", type=int, default=Options.num_draft_tokens,
                   help=f"--speculative-num-draft-tokens (default {Options.num_draft_tokens})")
    p.add_argument("--dry-run", action="store_true", help="print the command and environment, do not start")
    return p


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """(our flags, the flags after `--` that go to SGLang as they are)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []
