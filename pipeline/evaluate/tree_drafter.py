"""Tree drafting with the exported drafter, step by step as SGLang's EAGLE worker does it
(`EagleWorkerV2.draft_forward`, srt/speculative/eagle_worker_v2.py).

The extend over newly verified positions is the chain drafter's (one cache of rows built
from target states). Then `num_steps` steps: step 0 takes the root's top-k; each later step
runs the k frontier nodes as one batch of k rows and scores their children.

The k rows are SGLang's k slots. SGLang gives slot j its own KV locations for each step
(`per_step_draft_out_cache_loc`), and a slot's query at step i reads the prefix plus what
slot j wrote at steps 0..i (`generate_draft_decode_kv_indices`, kernels/ops/speculative/
cache_locs.py), whichever branch the node in slot j came from. `SlotCache` keeps exactly
that, so a re-ranked frontier sees the same (approximate) context it sees under SGLang.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.drafter.model import Eagle3Drafter, KVCache
from pipeline.evaluate.drafter import ChainDrafter
from pipeline.evaluate.tree import Candidates, Setting, Tree, build_tree


class SlotCache:
    """The drafter's attention over a shared prefix plus each slot's own keys (k rows)."""

    def __init__(self, prefix: KVCache) -> None:
        self.prefix = prefix  # the chain drafter's KVCache ([1, kv_heads, P, d]); never extended here
        self.k: torch.Tensor | None = None  # [slots, kv_heads, steps so far, d]
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return self.prefix.length + (0 if self.k is None else int(self.k.shape[2]))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        slots, prefix_k, prefix_v = q.shape[0], self.prefix.k, self.prefix.v
        if prefix_k is None or prefix_v is None:
            raise ValueError("the slots attend over the chain drafter's prefix: extend it first")
        keys = torch.cat((prefix_k.expand(slots, -1, -1, -1), self.k), dim=2)
        values = torch.cat((prefix_v.expand(slots, -1, -1, -1), self.v), dim=2)
        keys = keys.repeat_interleave(groups, dim=1) if groups > 1 else keys
        values = values.repeat_interleave(groups, dim=1) if groups > 1 else values
        return F.scaled_dot_product_attention(q, keys, values)


class TreeDrafter:
    """`propose_tree(seq, aux, setting)`: the draft tree SGLang would verify after `seq`."""

    def __init__(self, model: Eagle3Drafter) -> None:
        self.chain = ChainDrafter(model)
        self.model = model

    def reset(self) -> None:
        self.chain.reset()

    def _top(self, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k draft probabilities and their target-vocabulary ids (SGLang: softmax, fast_topk,
        then hot_token_id)."""
        p, i = torch.topk(torch.softmax(logits.float(), dim=-1), k, dim=-1)
        return p, self.model.draft_to_target(i)

    @torch.inference_mode()
    def propose_tree(self, seq: list[int], aux: torch.Tensor, s: Setting) -> Tree:
        k, n, dev = s.topk, len(seq), self.chain.device
        logits, hidden = self.chain.extend(seq, aux)
        topk_p, topk_index = self._top(logits, k)  # [k], [k]
        cand = Candidates([topk_p], [topk_index], [torch.arange(-1, k, device=dev)])
        ids, hidden, scores = topk_index, hidden.expand(k, 1, -1), topk_p
        cache = SlotCache(self.chain.cache)
        for i in range(1, s.num_steps):
            pos = torch.full((k, 1), n - 2 + i, device=dev)
            logits, out = self.model(ids.view(k, 1), hidden, pos, cache=cache)
            topk_p, topk_index = self._top(logits[:, -1], k)  # [k, k]
            expand = scores[:, None] * topk_p  # [k, k]
            scores, pick = torch.topk(expand.flatten(), k)
            cand.scores.append(expand.flatten())
            cand.tokens.append(topk_index.flatten())
            cand.parents.append(pick + (k * k * (i - 1) + k))
            ids, hidden = topk_index.flatten()[pick], out[pick // k]
        return build_tree(seq[-1], cand, k, s.num_draft_tokens)
