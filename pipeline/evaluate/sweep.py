"""Several SGLang settings scored on the same prompts against one greedy reference per
prompt, and the line of flags that serves the best of them.

Every setting is one Arm per drafter (the trained one, and the untrained baseline when
asked). The reference is decoded once per prompt, or read from the kept references
(references.py) when an earlier evaluation of the same target decoded it; a kept
reference that a speculative decode disagrees with is decoded again before anything is
called a mismatch. "Best" is the highest wall-clock speedup estimate (speedup_model.py),
acceptance length breaking ties, or acceptance length alone when no estimate was made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.evaluate.batch import greedy_batch, speculate_batch
from pipeline.evaluate.drafter import ChainDrafter
from pipeline.evaluate.errors import Mismatch
from pipeline.evaluate.scoring import Arm
from pipeline.evaluate.speculative import Decoded, greedy
from pipeline.evaluate.speedup_model import Times, speedup
from pipeline.evaluate.tree import Setting
from pipeline.evaluate.tree_drafter import TreeDrafter
from pipeline.records.evaluate_report import SettingRow

if TYPE_CHECKING:
    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.evaluate.prompts import Prompt
    from pipeline.evaluate.references import References
    from pipeline.evaluate.report import Summary
    from pipeline.evaluate.verifier import Target


def arms_for(label: str, model: Eagle3Drafter, settings: list[Setting]) -> list[Arm]:
    return [Arm(f"{label} {s.label}", ChainDrafter(model) if s.topk == 1 else TreeDrafter(model), s)
            for s in settings]


def reference(target: Target, prompt: list[int], max_new: int, refs: References | None) -> tuple[Decoded, bool]:
    """(greedy Decoded, from_kept) for one prompt."""
    kept = refs.get(prompt, max_new) if refs is not None else None
    if kept is not None:
        return Decoded(kept, forwards=len(kept)), True
    ref = greedy(target, prompt, max_new)
    if refs is not None:
        refs.put(prompt, max_new, ref.tokens)
    return ref, False


def score_prompt(target: Target, prompt: Prompt, arms: list[Arm], max_new: int, refs: References | None) -> Decoded:
    """Every arm on one prompt; the greedy reference used."""
    ref, kept = reference(target, prompt.input_ids, max_new, refs)
    for arm in arms:
        try:
            arm.score(target, prompt, ref, arm.setting.num_steps, max_new)
        except Mismatch:
            if not kept:
                raise
            fresh = greedy(target, prompt.input_ids, max_new)  # the kept file may be wrong; the target decides
            if fresh.tokens == ref.tokens:
                raise
            ref, kept = fresh, False
            assert refs is not None  # a kept reference came from them
            refs.put(prompt.input_ids, max_new, ref.tokens)
            arm.score(target, prompt, ref, arm.setting.num_steps, max_new)
    return ref


def table(settings: list[Setting], summaries: list[Summary], times: Times | None) -> tuple[SettingRow, ...]:
    rows = []
    for s, sm in zip(settings, summaries):
        est = speedup(s, sm.acceptance_length, times) if times else None
        rows.append(SettingRow(setting=s.label, topk=s.topk, num_draft_tokens=s.num_draft_tokens, flags=s.flags(),
                               **sm.record_fields(), target_forwards_saved=sm.greedy_forwards - sm.spec_forwards,
                               speedup_estimate=None if est is None else round(est, 3)))
    return tuple(rows)


def best(rows: tuple[SettingRow, ...]) -> SettingRow:
    return max(rows, key=lambda r: (r.speedup_estimate or 0.0, r.acceptance_length))


def lines(rows: tuple[SettingRow, ...]) -> list[str]:
    out = ["setting (steps,topk,draft tokens)  acceptance length  per-position accept rate      "
           "forwards saved  speedup estimate"]
    for r in rows:
        rates = " ".join(f"{x:.2f}" for x in r.accept_rate)
        est = "n/a" if r.speedup_estimate is None else f"~{r.speedup_estimate:.2f}x"
        out.append(f"  {r.setting:<32} {r.acceptance_length:>17.3f}  {rates:<28} "
                   f"{r.target_forwards_saved:>14}  {est:>16}")
    return out


def score_chunk(target: Target, prompts: list[Prompt], arms: list[Arm], max_new: int,
                refs: References | None) -> tuple[list[Decoded], int]:
    """Every arm on a chunk of prompts decoded in lockstep (batch.py; top-1 settings only).
    A batched answer is a hint like a kept one: where a prompt's speculative output and its
    reference disagree, both are decoded again one prompt at a time, and those decide."""
    ids = [p.input_ids for p in prompts]
    kept = [refs.get(i, max_new) if refs is not None else None for i in ids]
    todo = [j for j, k in enumerate(kept) if k is None]
    fresh = dict(zip(todo, greedy_batch(target, [ids[j] for j in todo], max_new))) if todo else {}

    ref = [fresh[j] if k is None else Decoded(k, forwards=len(k)) for j, k in enumerate(kept)]
    got = [speculate_batch(target, arm.proposer.model, ids, max_new, arm.setting.num_steps) for arm in arms]
    redone = [j for j in range(len(ids)) if any(g[j].tokens != ref[j].tokens for g in got)]
    for j in redone:
        ref[j] = greedy(target, ids[j], max_new)
        for arm, g in zip(arms, got):
            if g[j].tokens != ref[j].tokens:
                g[j] = arm.decode(target, prompts[j], arm.setting.num_steps, max_new)
    for arm, g in zip(arms, got):
        for j, p in enumerate(prompts):
            arm.record(p, g[j], ref[j])
    if refs is not None:
        for j in set(todo) | set(redone):
            refs.put(ids[j], max_new, ref[j].tokens)
    return ref, len(redone)
