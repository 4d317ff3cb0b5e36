"""`python -m pipeline.regenerate --synthesize N --estimate [--turns N] [--max-question-tokens N]
[--max-new-tokens N] [--system-prompts FILE] --json`: how many bytes the output can reach, for
the console's `free_space` check: every question and answer at its longest
(regenerate's BYTES_PER_TOKEN a token), the longest system prompt, and a line's framing."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.records.synthesis_estimate import SynthesisEstimate, format_estimate
from pipeline.regenerate.estimate import BYTES_PER_TOKEN, LINE_BYTES
from pipeline.regenerate.options import MAX_NEW_TOKENS, _bound
from pipeline.regenerate.synthesis.options import MAX_RECORDS, MAX_TURNS, read_system_prompts

TURN_BYTES = 64  # the role keys and brackets of a question and its answer


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.regenerate --synthesize N --estimate",
                                description="Upper bound on the bytes a synthesis run writes.")
    p.add_argument("--estimate", action="store_true", required=True)
    p.add_argument("--synthesize", type=int, required=True, metavar="N")
    p.add_argument("--turns", type=int, default=1)
    p.add_argument("--max-question-tokens", type=int, default=256)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--system-prompts", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p


def estimate(records: int, turns: int, question_tokens: int, answer_tokens: int,
             system_bytes: int) -> SynthesisEstimate:
    turn = (question_tokens + answer_tokens) * BYTES_PER_TOKEN + TURN_BYTES
    return SynthesisEstimate(records=records, turns=turns, bytes=records * (turns * turn + system_bytes + LINE_BYTES),
                             formula=f"records * (turns * ((max_question_tokens + max_new_tokens) * {BYTES_PER_TOKEN} "
                                     f"+ {TURN_BYTES}) + longest system prompt + {LINE_BYTES})")


def run(argv: list[str]) -> int:
    a, _ = build_parser().parse_known_args(argv)  # the run's own flags may come along: they change nothing here
    _bound("--synthesize", a.synthesize, 0, MAX_RECORDS)
    _bound("--turns", a.turns, 1, MAX_TURNS)
    _bound("--max-question-tokens", a.max_question_tokens, 1, MAX_NEW_TOKENS)
    _bound("--max-new-tokens", a.max_new_tokens, 1, MAX_NEW_TOKENS)
    prompts = read_system_prompts(a.system_prompts) if a.system_prompts is not None else ()
    system = max((len(s.encode()) + 32 for s in prompts), default=0)
    figures = estimate(a.synthesize, a.turns, a.max_question_tokens, a.max_new_tokens, system)
    if a.json:
        print(format_estimate(figures))
    else:
        print(f"{a.synthesize} records of {a.turns} turns: at most {figures.bytes} bytes")
    return 0
