"""Answers that fall into a loop, stopped and cut where the loop begins.

A small target decoding greedily often falls into a loop it never leaves ("The original text
is:\\n\\n" 53 times): 47 of 81 SmolLM2-135M answers to ShareGPT prompts ran to the 384-token
bound, and past their 128th token 84 % of tokens were what had followed the same four tokens
earlier in the answer. Such tails make most of a drafter's training tokens while teaching it
one thing, copying, that a handful of periods teaches as well; validation accuracy on them
reads far above what the drafter accepts on fresh prompts. With `--trim-loops` the decoder
stops an answer at the token that completes an exact loop (this module's rule, applied a
token at a time on the device by decoder.LoopWatch), so the tail is never generated, and the
answer keeps the loop's first `KEEP_PERIODS` periods (the drafter still sees a loop start).
An answer that ends on its end token, or never repeats exactly, is left whole.
"""

from __future__ import annotations

import numpy as np

MAX_PERIOD = 128  # longest repeated unit looked for, in tokens
REPEATS = 3  # a tail counts as a loop from its third period on
MIN_LOOP_TOKENS = 16  # and only when it is this long: "000" at the bound is a number, not a loop
KEEP_PERIODS = 2


def loop_tail(tokens: list[int]) -> tuple[int, int] | None:
    """(start, period) of the longest suffix that repeats one unit at least `REPEATS` times
    over at least `MIN_LOOP_TOKENS` tokens; the shortest unit when several start at the same
    place. None when there is none."""
    a = np.asarray(tokens, dtype=np.int64)
    n = len(a)
    best: tuple[int, int] | None = None
    for p in range(1, min(MAX_PERIOD, n // REPEATS) + 1):
        same = a[p:] == a[:-p]
        if not same[-1]:
            continue
        breaks = np.flatnonzero(~same)
        run = len(same) - (int(breaks[-1]) + 1 if breaks.size else 0)
        start = n - run - p
        if run + p >= max(REPEATS * p, MIN_LOOP_TOKENS) and (best is None or start < best[0]):
            best = (start, p)
    return best


def trim(tokens: list[int]) -> list[int]:
    """`tokens` up to its loop's first `KEEP_PERIODS` periods, or unchanged without a loop."""
    found = loop_tail(tokens)
    if found is None:
        return tokens
    start, period = found
    return tokens[: start + KEEP_PERIODS * period]
