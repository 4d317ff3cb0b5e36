"""Seeded sampling for many answers decoded together: each answer's draws depend on its own
seed and token index only, never on its batch-mates, the device's random state or the order
the answers were decoded in.

One `torch.Generator` per row (the old loop) costs a host call per row per token; here the
noise is a counter-based hash computed on the device for the whole batch at once: a uniform
for (seed, step, vocabulary id), turned into Gumbel noise, and `argmax(logits / T + gumbel)`
is a draw from softmax(logits / T) (the Gumbel-max trick). Top-p removes the tail first.
The hash works on 32-bit values held in int64 with factors below 2**27, so no product
overflows and CPU and CUDA give the same bits.
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


class Sampler:
    """The next token of each row: greedy at temperature 0, else seeded Gumbel-max. With
    `per_row` each row may have its own temperature (a call passes `temps`); a row at the
    sampler's own temperature draws exactly what it would draw without."""

    def __init__(self, vocab: int, device: torch.device, temperature: float, top_p: float,
                 per_row: bool = False) -> None:
        self.temperature, self.top_p, self.per_row = temperature, top_p, per_row
        self.vocab_hash = mix32(torch.arange(vocab, device=device, dtype=torch.int64))

    def __call__(self, logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                 temps: torch.Tensor | None = None) -> torch.Tensor:
        if temps is not None:
            drawn = self._draw(logits, seeds, steps, temps.clamp(min=1e-6)[:, None])
            return torch.where(temps > 0, drawn, logits.argmax(dim=-1))
        if self.temperature == 0:
            return logits.argmax(dim=-1)
        return self._draw(logits, seeds, steps, self.temperature)

    def _draw(self, logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
              temperature: float | torch.Tensor) -> torch.Tensor:
        scaled = logits.float() / temperature
        if self.top_p < 1:
            scaled = top_p_filter(scaled, self.top_p)
        noise = gumbel(seeds, steps, self.vocab_hash[: scaled.shape[-1]])
        return (scaled + noise).argmax(dim=-1)
