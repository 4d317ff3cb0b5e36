"""The demo's target model: a small Llama trained on the demo's own chats.

A drafter learns to predict its target, so the target must have learnt something: a
randomly initialised one would make acceptance meaningless. Training is a fixed number
of steps with seeded sampling on one thread, so the same seed gives the same weights.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


@dataclass(frozen=True)
class TargetShape:
    num_hidden_layers: int = 8  # capture layers 2, 4, 5: distinct from 7 layers on
    hidden_size: int = 128
    intermediate_size: int = 384
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = 2048


@dataclass(frozen=True)
class TrainPlan:
    steps: int = 300
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 2e-3
    warmup: int = 20


@dataclass(frozen=True)
class TrainResult:
    initial_loss: float
    final_loss: float
    steps: int
    tokens_seen: int


def make_config(shape: TargetShape, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def token_stream(tokenizer: PreTrainedTokenizerFast, conversations: list[list[dict]], seed: int) -> torch.Tensor:
    """All chats rendered with the chat template, shuffled and concatenated (packed LM data)."""
    order = list(range(len(conversations)))
    random.Random(f"{seed}:pack").shuffle(order)
    texts = [tokenizer.apply_chat_template(conversations[i], tokenize=False) for i in order]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return torch.tensor([t for seq in ids for t in seq], dtype=torch.long)


def _lr_at(step: int, plan: TrainPlan) -> float:
    if step < plan.warmup:
        return plan.lr * (step + 1) / plan.warmup
    progress = (step - plan.warmup) / max(1, plan.steps - plan.warmup)
    return plan.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(
    model: LlamaForCausalLM,
    stream: torch.Tensor,
    plan: TrainPlan,
    seed: int,
    on_step: Callable[[int, float, float], None] | None = None,
) -> TrainResult:
    """Plain next-token training on random windows of the packed stream.

    `on_step(step, loss, elapsed_s)` is called after every step (1-based step).
    """
    seq_len = min(plan.seq_len, len(stream) - 1)
    if seq_len < 8:
        raise ValueError(f"training stream has only {len(stream)} tokens; generate more data")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=plan.lr, betas=(0.9, 0.95), weight_decay=0.01)
    model.train()
    started = time.monotonic()
    first = last = float("nan")
    for step in range(plan.steps):
        starts = torch.randint(0, len(stream) - seq_len, (plan.batch_size,), generator=gen)
        batch = torch.stack([stream[s : s + seq_len] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, plan)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = float(loss.detach())
        if step == 0:
            first = last
        if on_step is not None:
            on_step(step + 1, last, time.monotonic() - started)
    model.eval()
    return TrainResult(first, last, plan.steps, plan.steps * plan.batch_size * seq_len)


def build_target(shape: TargetShape, tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(make_config(shape, tokenizer)).float()
