"""A draft tree as SGLang 0.5.23 builds and verifies it, in plain PyTorch.

Where each rule comes from (the sglang wheel; docs/export-evaluate.md has the full list):
- candidates and parents: `select_top_k_tokens` (srt/speculative/spec_utils.py). Step 0
  offers the root's top-k; every later step scores all top-k x top-k children of the k
  frontier nodes by the product of draft probabilities and keeps the best k as the next
  frontier. Every child scored, kept as frontier or not, is a candidate.
- selection: `organize_draft_results` (srt/speculative/eagle_utils.py): the
  num_draft_tokens - 1 candidates of highest cumulative probability, in candidate order.
- parents, depths and the mask: `build_tree_kernel_efficient_func`
  (kernels/ops/speculative/spec_tree.py): candidate s hangs under `parent_list[s // topk]`;
  a node whose parent was not selected is linked to nothing (it can never be accepted) and
  sees only the prefix and itself.
- acceptance: `verify_tree_greedy_func` (same file): from the root, follow the child whose
  token is the target's greedy choice; the target's choice at the last accepted node is
  the bonus token.

Node 0 is the root (the last committed token); nodes 1..D-1 are the selected drafts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Setting:
    """SGLang's three flags: --speculative-num-steps, --speculative-eagle-topk,
    --speculative-num-draft-tokens."""

    num_steps: int
    topk: int
    num_draft_tokens: int

    @property
    def label(self) -> str:
        return f"{self.num_steps},{self.topk},{self.num_draft_tokens}"

    @property
    def candidates(self) -> int:
        return self.topk + (self.num_steps - 1) * self.topk * self.topk

    def flags(self) -> str:
        return (f"--speculative-algorithm EAGLE3 --speculative-num-steps {self.num_steps} "
                f"--speculative-eagle-topk {self.topk} --speculative-num-draft-tokens {self.num_draft_tokens}")


def parse_setting(text: str, max_steps: int, max_topk: int, max_tokens: int) -> Setting:
    """`STEPS,TOPK,DRAFT_TOKENS`; ValueError with the rule it breaks."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"{text!r} is not STEPS,TOPK,DRAFT_TOKENS (three whole numbers, e.g. 3,1,4)")
    s = Setting(*(int(p) for p in parts))
    if not 1 <= s.num_steps <= max_steps:
        raise ValueError(f"{text!r}: num_steps must be between 1 and {max_steps}")
    if not 1 <= s.topk <= max_topk:
        raise ValueError(f"{text!r}: topk must be between 1 and {max_topk}")
    if s.topk == 1 and s.num_draft_tokens != s.num_steps + 1:
        raise ValueError(f"{text!r}: with topk 1 SGLang sets num_draft_tokens to num_steps + 1 = {s.num_steps + 1}; "
                         f"write {s.num_steps},1,{s.num_steps + 1}")
    if not 2 <= s.num_draft_tokens <= min(max_tokens, s.candidates + 1):
        raise ValueError(f"{text!r}: num_draft_tokens must be between 2 and {min(max_tokens, s.candidates + 1)} "
                         f"({s.candidates} candidates at {s.num_steps} steps of top-{s.topk}, plus the root)")
    return s


@dataclass
class Candidates:
    """What the draft loop records, per request (SGLang's score_list, token_list, parents_list)."""

    scores: list[torch.Tensor]  # step 0: [k]; step i: [k*k], cumulative draft probability
    tokens: list[torch.Tensor]  # same shapes: target-vocabulary ids
    parents: list[torch.Tensor]  # step 0: [-1, 0..k-1]; step i: flat indices of step i's frontier


@dataclass(frozen=True)
class Tree:
    tokens: list[int]  # [D]: the root, then the selected drafts in candidate order
    parent: list[int]  # [D]: node index of each node's parent; -1 for the root and for unlinked nodes
    depth: list[int]  # [D]: 0 for the root; an unlinked node counts 1

    def ancestors(self) -> torch.Tensor:
        """[D, D] bool: row i attends to column j (j is i or an ancestor of i)."""
        n = len(self.tokens)
        mask = torch.zeros(n, n, dtype=torch.bool)
        mask[:, 0] = True  # every node sees the root, an unlinked one too
        for i in range(1, n):
            j = i
            while j > 0:
                mask[i, j] = True
                j = self.parent[j]
        return mask


def build_tree(root: int, cand: Candidates, topk: int, num_draft_tokens: int) -> Tree:
    """organize_draft_results, then the parent links build_tree_kernel_efficient derives."""
    scores = torch.cat([s.flatten() for s in cand.scores])
    tokens = torch.cat([t.flatten() for t in cand.tokens])
    picked = torch.sort(torch.topk(scores, num_draft_tokens - 1).indices).values.tolist()
    parent_list = torch.cat(cand.parents[:-1]).tolist() if len(cand.parents) > 1 else []
    node_of = {s: i + 1 for i, s in enumerate(picked)}
    parent, depth = [-1], [0]
    for s in picked:
        p = 0 if s // topk == 0 else node_of.get(parent_list[s // topk], -1)
        parent.append(p)
        depth.append(depth[p] + 1 if p >= 0 else 1)
    return Tree([root] + [int(tokens[s]) for s in picked], parent, depth)


def accept(tree: Tree, choice: list[int]) -> tuple[list[int], int]:
    """verify_tree_greedy: the accepted nodes (root excluded) and the bonus token, where
    choice[i] is the target's greedy token after node i."""
    path: list[int] = []
    node = 0
    while True:
        nxt = next((c for c in range(1, len(tree.tokens))
                    if tree.parent[c] == node and tree.tokens[c] == choice[node]), None)
        if nxt is None:
            return path, choice[node]
        path.append(nxt)
        node = nxt
