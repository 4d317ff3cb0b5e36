"""Chain speculative decoding of many prompts in lockstep: one target forward and one drafter
forward per step for the whole batch, where the per-prompt loop spends one per prompt.

On a GPU a forward of a small target is bound by launching its kernels, not by its
arithmetic, so B prompts in one forward cost about what one prompt does (the H200 spent
about 9 ms per forward of the 135M target, the GPU work of one well under 1 ms).

Rows of a batch commit different numbers of tokens per round, so nothing is cut out of the
caches: every forward appends a slot per token to every row, and a validity mask says which
slots a row still holds (its prompt, its committed tokens). A rejected draft's slot, a
drafter's chain step and a padding slot stay in place, masked, the same as if they had been
cut: a masked key adds exactly zero to the attention. Each row's positions count only its
own valid tokens. The rules of a round are speculative.speculate's, row by row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pipeline.evaluate.speculative import Decoded, _finish

if TYPE_CHECKING:
    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.evaluate.verifier import Target


def _allowed(valid: torch.Tensor, new_valid: torch.Tensor) -> torch.Tensor:
    """[B, q, S + q] bool: new token j of row b sees row b's valid slots and its own valid
    earlier new tokens; a padding query sees only itself (a row of nothing is NaN)."""
    b, q = new_valid.shape
    causal = torch.ones(q, q, dtype=torch.bool, device=valid.device).tril()
    new = causal[None] & new_valid[:, None, :]
    new |= torch.eye(q, dtype=torch.bool, device=valid.device)[None]
    old = valid[:, None, :].expand(b, q, valid.shape[1]) & new_valid[:, :, None]
    return torch.cat((old, new), dim=2)


def _padded(rows: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    q = max(1, max(len(r) for r in rows))
    ids = torch.zeros(len(rows), q, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
    lens = torch.tensor([len(r) for r in rows])
    return ids.to(device), (torch.arange(q)[None] < lens[:, None]).to(device)


class BatchTarget:
    """The target over B rows; `forward` appends, `settle` says what each row keeps."""

    def __init__(self, target: Target, rows: int) -> None:
        from transformers import DynamicCache

        self.t = target
        self.cache = DynamicCache(config=target.model.config)
        self.valid = torch.zeros(rows, 0, dtype=torch.bool, device=target.device)
        self.length = [0] * rows  # valid slots of each row: the position of its next token
        self._new = 0

    @torch.inference_mode()
    def forward(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy token after each new token [B, q] (CPU) and their captured states [B, q, 3H]."""
        t = self.t
        ids, new_valid = _padded(rows, t.device)
        pos = torch.tensor(self.length, device=t.device)[:, None] + torch.arange(ids.shape[1], device=t.device)[None]
        allowed = _allowed(self.valid, new_valid)
        dtype = t.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=t.device).masked_fill_(~allowed, torch.finfo(dtype).min)
        t._seen.clear()
        try:
            out = t.model(input_ids=ids, attention_mask=mask[:, None], position_ids=pos, use_cache=True,
                          **{t.cache_kw: self.cache})
            aux = torch.cat([t._seen[i] for i in t.capture], dim=-1)
        finally:
            t._seen.clear()
        t.positions_run += int(new_valid.sum())
        self.valid = torch.cat((self.valid, torch.zeros_like(new_valid)), dim=1)
        self._new = ids.shape[1]
        return out.logits.float().argmax(-1).cpu(), aux

    @torch.inference_mode()
    def settle(self, keep: list[int]) -> None:
        """Row b keeps the first keep[b] tokens of the last forward."""
        start = self.valid.shape[1] - self._new
        for b, k in enumerate(keep):
            self.valid[b, start : start + k] = True
            self.length[b] += k


class MaskedCache:
    """The drafter's keys and values over B rows with a validity mask (pipeline.drafter's cache
    protocol: `attend`). `begin(new_valid)` before a forward, `end()` after; one layer."""

    def __init__(self, rows: int, device: torch.device) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.valid = torch.zeros(rows, 0, dtype=torch.bool, device=device)
        self.new_valid = self.valid  # the new slots' validity, set by begin

    def begin(self, new_valid: torch.Tensor) -> None:
        self.new_valid = new_valid

    def end(self) -> None:
        self.valid = torch.cat((self.valid, self.new_valid), dim=1)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
        allowed = _allowed(self.valid, self.new_valid)
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        keys = self.k.repeat_interleave(groups, dim=1) if groups > 1 else self.k
        values = self.v.repeat_interleave(groups, dim=1) if groups > 1 else self.v
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed[:, None])


class BatchDrafter:
    """ChainDrafter over B rows: extend each row by the positions verified since its last
    round, then k - 1 chain steps whose slots are masked out once the round is drafted."""

    def __init__(self, model: Eagle3Drafter, rows: int) -> None:
        self.model = model
        self.device = model.fc.weight.device
        self.cache = MaskedCache(rows, self.device)
        self.rows = [0] * rows  # drafter rows built from target states, per batch row

    def _run(self, ids: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor,
             new_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.cache.begin(new_valid)
        logits, out = self.model(ids, hidden, pos, cache=self.cache)
        self.cache.end()
        return logits, out

    @torch.inference_mode()
    def propose(self, seqs: list[list[int]], states: list[torch.Tensor | None], k: int,
                active: list[bool]) -> list[list[int]]:
        """k drafts for each active row; states[b] holds the target's states of the positions
        row b verified since its last round."""
        b_all = len(seqs)
        ext = [seqs[b][self.rows[b] + 1 :] if active[b] else [] for b in range(b_all)]
        ids, new_valid = _padded(ext, self.device)
        width = ids.shape[1]
        given = {b: s for b, s in enumerate(states) if active[b] and s is not None}
        if len(given) != sum(active):
            raise ValueError("an active row has no target states to draft from")
        hidden = torch.zeros(b_all, width, next(iter(given.values())).shape[-1],
                             device=self.device, dtype=self.model.fc.weight.dtype)
        for b, state in given.items():
            hidden[b, : len(ext[b])] = state.to(hidden.dtype)
        pos = torch.tensor(self.rows, device=self.device)[:, None] + torch.arange(width, device=self.device)[None]
        logits, out = self._run(ids, hidden, pos, new_valid)
        last = torch.tensor([max(len(e) - 1, 0) for e in ext], device=self.device)
        rows = torch.arange(b_all, device=self.device)
        logits, out = logits[rows, last], out[rows, last][:, None]
        steps_from = self.cache.valid.shape[1]
        act = torch.tensor(active, device=self.device)[:, None]
        drafts: list[list[int]] = [[] for _ in range(b_all)]
        for j in range(k):
            tok = self.model.draft_to_target(logits.float().argmax(-1))
            for b, t in enumerate(tok.tolist()):
                if active[b]:
                    drafts[b].append(t)
            if j == k - 1:
                break
            pos = torch.tensor([len(s) - 1 + j for s in seqs], device=self.device)[:, None]
            logits, out = self._run(tok[:, None], out, pos, act)
            logits, out = logits[:, -1], out[:, -1:]
        self.cache.valid[:, steps_from:] = False  # SGLang drops the chain's own rows
        for b in range(b_all):
            if active[b]:
                self.rows[b] = len(seqs[b]) - 1
        return drafts


@torch.inference_mode()
def greedy_batch(target: Target, prompts: list[list[int]], max_new: int) -> list[Decoded]:
    bt = BatchTarget(target, len(prompts))
    nxt, _ = bt.forward([list(p) for p in prompts])
    bt.settle([len(p) for p in prompts])
    outs = [[int(nxt[b, len(p) - 1])] for b, p in enumerate(prompts)]
    done = [_finish(o, max_new, target.eos)[1] for o in outs]
    while not all(done):
        nxt, _ = bt.forward([[o[-1]] if not d else [] for o, d in zip(outs, done)])
        bt.settle([0 if d else 1 for d in done])
        for b in range(len(prompts)):
            if not done[b]:
                outs[b], done[b] = _finish(outs[b] + [int(nxt[b, 0])], max_new, target.eos)
    return [Decoded(o, forwards=len(o)) for o in outs]


@torch.inference_mode()
def speculate_batch(target: Target, model: Eagle3Drafter, prompts: list[list[int]], max_new: int, k: int) -> list[Decoded]:
    """speculative.speculate for every prompt at once: the same rounds, row by row."""
    n = len(prompts)
    bt, bd = BatchTarget(target, n), BatchDrafter(model, n)
    nxt, aux = bt.forward([list(p) for p in prompts])
    bt.settle([len(p) for p in prompts])
    seqs = [list(p) + [int(nxt[b, len(p) - 1])] for b, p in enumerate(prompts)]
    states: list[torch.Tensor | None] = [aux[b, : len(p)] for b, p in enumerate(prompts)]
    results, done = [], []
    for b, p in enumerate(prompts):
        out, d = _finish(seqs[b][len(p):], max_new, target.eos)
        results.append(Decoded(out, forwards=1))
        done.append(d)
    while not all(done):
        active = [not d for d in done]
        drafts = bd.propose(seqs, states, k, active)
        nxt, aux = bt.forward([[seqs[b][-1]] + drafts[b] if active[b] else [] for b in range(n)])
        keep = [0] * n
        for b in range(n):
            if not active[b]:
                continue
            choice = nxt[b, : k + 1].tolist()
            a = 0
            while a < k and drafts[b][a] == choice[a]:
                a += 1
            results[b].accepted.append(a)
            results[b].forwards += 1
            keep[b] = a + 1
            seqs[b] += drafts[b][:a] + [choice[a]]
            states[b] = aux[b, : a + 1]
            results[b].tokens, done[b] = _finish(seqs[b][len(prompts[b]):], max_new, target.eos)
        bt.settle(keep)
    return results
