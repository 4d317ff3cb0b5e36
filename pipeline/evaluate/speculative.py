"""Chain speculative decoding with greedy verification, and the plain greedy reference.

One round: the drafter proposes `k` tokens one after another (top-1 each), the target
scores the committed sequence plus all `k` drafts in one forward, the longest prefix of
drafts that equals the target's own greedy choices is accepted, and the target's choice
after it (the bonus token) is appended. A round therefore commits accepted + 1 tokens
per target forward, which is SGLang's acceptance length. Because every committed token
is the target's greedy choice, the output must equal plain greedy decoding: the caller
checks that and refuses to report otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from pipeline.evaluate.tree import accept
from pipeline.evaluate.verifier import Target

if TYPE_CHECKING:
    from pipeline.evaluate.tree import Setting
    from pipeline.evaluate.tree_drafter import TreeDrafter


class Proposer(Protocol):
    def reset(self) -> None:
        """A new prompt starts: drop any state kept between rounds."""
        ...

    def propose(self, seq: list[int], aux: torch.Tensor, k: int) -> list[int]:
        """`k` target-vocabulary tokens to follow `seq`; `aux` [len(seq)-1, 3H] holds the
        target's captured states for every position but the last."""
        ...


@dataclass
class Decoded:
    tokens: list[int]
    forwards: int  # target forward passes, the prompt's included
    accepted: list[int] = field(default_factory=list)  # drafts accepted in each verify round


def _finish(tokens: list[int], max_new: int, eos: set[int]) -> tuple[list[int], bool]:
    """Cut at the first EOS (kept) or at max_new; True when decoding is over."""
    for i, t in enumerate(tokens[:max_new]):
        if t in eos:
            return tokens[: i + 1], True
    return tokens[:max_new], len(tokens) >= max_new


def greedy(target: Target, prompt: list[int], max_new: int) -> Decoded:
    seq = list(prompt)
    out: list[int] = []
    forwards = 0
    done = False
    while not done:
        nxt = int(target.step(seq, keep=1).next_ids[-1])
        forwards += 1
        seq.append(nxt)
        out, done = _finish(out + [nxt], max_new, target.eos)
    return Decoded(out, forwards)


def _prefill(target: Target, proposer: Proposer | TreeDrafter, prompt: list[int],
             max_new: int) -> tuple[list[int], torch.Tensor, Decoded, bool]:
    """The prompt's forward: its first token is the target's, no draft produced it."""
    proposer.reset()
    first = target.step(list(prompt), keep=1)
    seq = list(prompt) + [int(first.next_ids[-1])]
    out, done = _finish(seq[len(prompt):], max_new, target.eos)
    return seq, first.aux, Decoded(out, forwards=1), done


def speculate(target: Target, proposer: Proposer, prompt: list[int], max_new: int, k: int) -> Decoded:
    seq, aux, result, done = _prefill(target, proposer, prompt, max_new)
    while not done:
        drafts = [int(t) for t in proposer.propose(seq, aux, k)]
        if len(drafts) != k:
            raise ValueError(f"the drafter proposed {len(drafts)} tokens, expected {k}")
        verify = target.step(seq + drafts, keep=k + 1)
        result.forwards += 1
        choice = verify.next_ids.tolist()  # the target's token after seq[-1], drafts[0], ...
        a = 0
        while a < k and drafts[a] == choice[a]:
            a += 1
        result.accepted.append(a)
        aux = verify.aux[: len(seq) + a]
        seq += drafts[:a] + [choice[a]]
        result.tokens, done = _finish(seq[len(prompt):], max_new, target.eos)
    return result


def speculate_tree(target: Target, drafter: TreeDrafter, prompt: list[int], max_new: int, setting: Setting) -> Decoded:
    """Tree rounds as SGLang serves them (pipeline.evaluate.tree): the drafter builds a tree of
    num_draft_tokens - 1 drafts, the target verifies it in one forward under the tree mask,
    the longest accepted path plus the bonus token is committed, and the drafter's cache is
    rebuilt along that path from the target's states."""
    seq, aux, result, done = _prefill(target, drafter, prompt, max_new)
    while not done:
        tree = drafter.propose_tree(seq, aux, setting)
        choice = target.verify_tree(seq, tree).tolist()
        result.forwards += 1
        path, bonus = accept(tree, choice)
        result.accepted.append(len(path))
        aux = target.commit(path)
        seq += [tree.tokens[i] for i in path] + [bonus]
        result.tokens, done = _finish(seq[len(prompt):], max_new, target.eos)
    return result
