"""What a server is asked for: its command line, and the frozen options it parses into
(defaults written once, in `Options`; `validate()` refuses, per mode, what a server cannot
take; the folders and the dump volume are command.build's to check)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.program_edge import BadInput
from pipeline.sizes import parse_size

PROG = "python -m pipeline.serve"
MAX_TP = 64
MAX_WAIT = 3600.0


@dataclass(frozen=True)
class Options:
    """What the server was asked for: the command line's flags, and the ones after `--` that go
to SGLang as they are."""

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
    extra: tuple[str, ...] = ()

    @property
    def dump_budget_bytes(self) -> int:
        return parse_size(self.dump_budget)

    def validate(self) -> None:
        """BadInput for a value past its bound or a flag the mode does not take; nothing is filled in."""
        if not 1 <= self.tp <= MAX_TP:
            raise BadInput(f"--tp must be 1..{MAX_TP}, got {self.tp}")
        if not 1 <= self.port <= 65535:
            raise BadInput(f"--port must be 1..65535, got {self.port}")
        if self.mem_fraction is not None and not 0 < self.mem_fraction < 1:
            raise BadInput(f"--mem-fraction must be between 0 and 1, got {self.mem_fraction}")
        if self.mode == "extract":
            self._validate_extract()
        elif self.mode == "normal":
            if self.dump_dir is not None or self.draft is not None:
                raise BadInput("--mode normal serves the target alone: --dump-dir is for --mode extract, --draft for "
                               "--mode eagle3")
        else:
            self._validate_eagle3()

    def _validate_extract(self) -> None:
        if self.dump_dir is None:
            raise BadInput("--mode extract needs --dump-dir (e.g. /dev/shm/sglang_hs)")
        if self.draft is not None:
            raise BadInput("--draft is for --mode eagle3; extraction serves the target alone")
        try:
            budget = self.dump_budget_bytes
        except ValueError as e:
            raise BadInput(f"--dump-budget: {e}") from None
        if budget <= 0:
            raise BadInput(f"--dump-budget must be more than 0 bytes, got {self.dump_budget!r}")
        if self.dump_wait is not None and not 0 <= self.dump_wait <= MAX_WAIT:
            raise BadInput(f"--dump-wait must be 0..{MAX_WAIT:g} seconds, got {self.dump_wait:g}")

    def _validate_eagle3(self) -> None:
        if self.draft is None:
            raise BadInput("--mode eagle3 needs --draft (the exported drafter folder)")
        for flag, v, lo in (("--num-steps", self.num_steps, 1), ("--topk", self.topk, 1),
                            ("--num-draft-tokens", self.num_draft_tokens, 2)):
            if not lo <= v <= 64:
                raise BadInput(f"{flag} must be {lo}..64, got {v}")


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


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of a command line, the flags after `--` kept as they are; argparse's own
    errors exit 2 with its usage."""
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    return Options(**vars(build_parser().parse_args(ours)), extra=tuple(extra))


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """(our flags, the flags after `--` that go to SGLang as they are)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []
