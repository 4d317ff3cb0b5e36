"""A wall-clock speedup ESTIMATE per setting, from forward times measured here.

The model (docs/export-evaluate.md, "Reading the sweep"): greedy decoding spends one
target forward of one token per token, t_T(1). A speculative round spends one target
forward over the D tree tokens, t_T(D), plus num_steps drafter forwards (the extend over
the verified tokens, then num_steps - 1 steps of topk rows), each timed as t_d(topk);
it commits `acceptance length` tokens. So

    speedup ~= acceptance_length * t_T(1) / (t_T(D) + num_steps * t_d(topk))

It leaves out what SGLang adds or saves around the forwards (scheduling, CUDA graphs,
batching many requests): it ranks settings on this machine, it does not predict a server.
Times are medians of a few repetitions, taken after the evaluation, on the first prompt.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch

from pipeline.evaluate.drafter import ChainDrafter
from pipeline.evaluate.tree import Setting, Tree
from pipeline.evaluate.tree_drafter import SlotCache

if TYPE_CHECKING:
    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.evaluate.verifier import Target

REPEATS = 5
Times = dict[str, dict[int, float]]
"""Seconds of a forward: {"target": {tokens verified: s}, "drafter": {rows (topk): s}}."""


def _draft_once(model: Eagle3Drafter, chain: ChainDrafter, ids: torch.Tensor, hidden: torch.Tensor,
                pos: torch.Tensor) -> object:
    """One drafter step of `ids` over the chain's prefix, in slots of its own (as a tree round)."""
    return model(ids, hidden, pos, cache=SlotCache(chain.cache))


def _median_seconds(fn: Callable[[], object], sync: Callable[[], object]) -> float:
    fn()  # warm-up: first-call allocations
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def chain_tree(root: int, drafts: int) -> Tree:
    return Tree([root] + [1] * drafts, list(range(-1, drafts)), list(range(drafts + 1)))


def forward_times(target: Target, drafter_model: Eagle3Drafter, prompt: list[int], settings: list[Setting]) -> Times:
    """{"target": {D: seconds}, "drafter": {topk: seconds}} for every size the settings use."""
    sync = torch.cuda.synchronize if target.device.type == "cuda" else (lambda: None)
    target.forget()
    first = target.step(list(prompt), keep=1)
    aux = first.aux[: len(prompt) - 1].clone()
    out: Times = {"target": {}, "drafter": {}}
    for d in sorted({1} | {s.num_draft_tokens for s in settings}):
        tree = chain_tree(prompt[-1], d - 1)
        out["target"][d] = _median_seconds(partial(target.verify_tree, prompt, tree), sync)
    target.forget()
    if drafter_model is not None:
        chain = ChainDrafter(drafter_model)
        with torch.inference_mode():
            chain.extend(prompt, aux)
            dev = chain.device
            for k in sorted({s.topk for s in settings}):
                hidden = torch.zeros(k, 1, drafter_model.config.hidden_size, device=dev, dtype=drafter_model.fc.weight.dtype)
                ids = torch.ones(k, 1, dtype=torch.long, device=dev)
                pos = torch.full((k, 1), len(prompt) - 1, device=dev)
                out["drafter"][k] = _median_seconds(partial(_draft_once, drafter_model, chain, ids, hidden, pos), sync)
    return out


def speedup(s: Setting, acceptance_length: float, times: Times) -> float | None:
    if not times.get("drafter"):
        return None
    round_s = times["target"][s.num_draft_tokens] + s.num_steps * times["drafter"][s.topk]
    return acceptance_length * times["target"][1] / round_s
