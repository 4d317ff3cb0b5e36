"""Seeded sampling for many answers decoded together: each answer's draws depend on its own
seed and token index only, never on its batch-mates, the device's random state or the order
the answers were decoded in.

One `torch.Generator` per row (the old loop) costs a host call per row per token; here the
noise is a counter-based hash computed on the device for the whole batch at once: a uniform
for (seed, step, vocabulary id), turned into Gumbel noise, and `argmax(logits / T + gumbel)`
is a draw from softmax(logits / T) (the Gumbel-max trick). Top-p removes the tail first.
The hash works on 32-bit values held in int64 with factors below 2**27, so no product
overflows and CPU and CUDA give the same bits.

With a temperature per row (regenerate --synthesize: questions sampled, answers greedy), most
rows of a step need no noise at all, and Gumbel noise for every row and vocabulary id is some
twenty passes over [rows, vocab] each step. So a per-row sampler draws by the inverse of each
row's distribution instead: one seeded uniform per row (the same hash), found in the row's
cumulative softmax: three passes, still a draw from softmax(logits / T) and still a function
of the row's own seed, token index and logits only.
"""

from __future__ import annotations

import torch

M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B  # the multiplier of a well-known 32-bit integer mixer (three xorshift-multiply rounds)


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijection of 32-bit values (in int64) that spreads every input bit over the output."""
    x = x ^ (x >> 16)
    x = (x * _MUL) & M32
    x = x ^ (x >> 16)
    x = (x * _MUL) & M32
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 32-bit keys per row from its 63-bit seed and its token index."""
    lo, hi = seeds & M32, (seeds >> 32) & M32
    k1 = mix32(lo ^ mix32(hi ^ mix32(steps & M32)))
    k2 = mix32(k1 ^ 0x2545F491)
    return k1, k2


def gumbel(seeds: torch.Tensor, steps: torch.Tensor, vocab_hash: torch.Tensor) -> torch.Tensor:
    """[rows, vocab] float32 Gumbel noise; `vocab_hash` is mix32(arange(vocab)), made once."""
    k1, k2 = row_keys(seeds, steps)
    bits = mix32(mix32(k1[:, None] ^ vocab_hash[None, :]) ^ k2[:, None])
    u = ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))  # strictly inside (0, 1)
    return -torch.log(-torch.log(u))


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits with every token outside the smallest set of probability >= top_p set to -inf."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def uniform(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """[rows] float32 uniforms strictly inside (0, 1), one per (seed, token index)."""
    k1, _ = row_keys(seeds, steps)
    return ((k1 >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))


class Sampler:
    """The next token of each row: greedy at temperature 0, else seeded Gumbel-max. With
    `per_row` each row has its own temperature (a call passes `temps`, 0 for greedy) and a
    sampled row draws by the inverse of its cumulative distribution (the module's docstring)."""

    def __init__(self, vocab: int, device: torch.device, temperature: float, top_p: float,
                 per_row: bool = False) -> None:
        self.temperature, self.top_p, self.per_row = temperature, top_p, per_row
        self.vocab_hash = mix32(torch.arange(vocab, device=device, dtype=torch.int64))

    def __call__(self, logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                 temps: torch.Tensor | None = None) -> torch.Tensor:
        if temps is not None:
            return torch.where(temps > 0, self._inverse(logits, seeds, steps, temps), logits.argmax(dim=-1))
        if self.temperature == 0:
            return logits.argmax(dim=-1)
        return self._gumbel(logits, seeds, steps)

    def _inverse(self, logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                 temps: torch.Tensor) -> torch.Tensor:
        scaled = logits.float() / torch.where(temps > 0, temps, 1.0)[:, None]
        if self.top_p < 1:
            scaled = top_p_filter(scaled, self.top_p)
        cdf = torch.softmax(scaled, dim=-1).cumsum(dim=-1)
        u = uniform(seeds, steps) * cdf[:, -1]
        return torch.searchsorted(cdf, u[:, None]).squeeze(-1).clamp(max=cdf.shape[-1] - 1)

    def _gumbel(self, logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        scaled = logits.float() / self.temperature
        if self.top_p < 1:
            scaled = top_p_filter(scaled, self.top_p)
        noise = gumbel(seeds, steps, self.vocab_hash[: scaled.shape[-1]])
        return (scaled + noise).argmax(dim=-1)
