"""`python -m pipeline.regenerate --estimate SOURCE ... [--limit N] [--max-new-tokens N] --json`:
how many bytes the output can reach, for the console's `free_space` check.

The records are counted by the same reader the run uses (so --limit and the skips agree),
and every answer is taken at its longest: `answers x max_new_tokens x BYTES_PER_TOKEN`, plus
the system and user text the records keep and a line's framing. A token of text is 3 to 5
bytes of UTF-8 on average; 8 leaves room for JSON escapes and non-Latin scripts.
"""

from __future__ import annotations

import argparse
from itertools import islice
from pathlib import Path

from pipeline.chat.sources import SourcePolicy, parse_role_map
from pipeline.records.regenerate_estimate import RegenerateEstimate, format_estimate
from pipeline.regenerate.options import MAX_NEW_TOKENS, MAX_SAMPLES, _bound
from pipeline.regenerate.sources import policy, records

BYTES_PER_TOKEN = 8
LINE_BYTES = 64  # the id, the keys and the brackets of one record


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.regenerate --estimate",
                                description="Upper bound on the bytes a regenerate run writes.")
    p.add_argument("--estimate", action="store_true", required=True)
    p.add_argument("sources", nargs="+", type=Path, metavar="SOURCE")
    p.add_argument("--limit", type=int)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--samples-per-prompt", type=int, default=1)
    p.add_argument("--trim-loops", action="store_true", help="accepted as the run takes it; the bound is the same")
    p.add_argument("--role-map", default="")
    p.add_argument("--max-invalid", type=float, default=0.05)
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p


def estimate(sources: tuple[Path, ...], max_new_tokens: int, limit: int | None, pol: SourcePolicy,
             samples: int = 1) -> RegenerateEstimate:
    n = answers = kept = 0
    stream = records(sources, pol)
    for rec in islice(stream, limit) if limit is not None else stream:
        n += 1
        conv = rec.conversations
        answers += sum(1 for i, m in enumerate(conv) if m["role"] == "user"
                       and (i + 1 == len(conv) or conv[i + 1]["role"] != "user"))
        kept += sum(len(m["content"].encode()) + 32 for m in conv if m["role"] != "assistant")
    n, answers, kept = n * samples, answers * samples, kept * samples  # each sample is a whole record
    answer_bytes = answers * (max_new_tokens * BYTES_PER_TOKEN + 32)
    return RegenerateEstimate(records=n, answers=answers, max_new_tokens=max_new_tokens, kept_bytes=kept,
                              answer_bytes=answer_bytes, bytes=kept + answer_bytes + n * LINE_BYTES,
                              formula=f"kept text + answers*(max_new_tokens*{BYTES_PER_TOKEN}+32) + records*{LINE_BYTES}")


def run(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    _bound("--max-new-tokens", a.max_new_tokens, 1, MAX_NEW_TOKENS)
    if a.limit is not None:
        _bound("--limit", a.limit, 1, 2**62)
    _bound("--max-invalid", a.max_invalid, 0, 1)
    _bound("--samples-per-prompt", a.samples_per_prompt, 1, MAX_SAMPLES)
    figures = estimate(tuple(a.sources), a.max_new_tokens, a.limit, policy(parse_role_map(a.role_map), a.max_invalid,
                                                                          False), a.samples_per_prompt)
    if a.json:
        print(format_estimate(figures))
    else:
        print(f"{figures.records} records, {figures.answers} answers of at most {a.max_new_tokens} tokens: "
              f"at most {figures.bytes} bytes")
    return 0
