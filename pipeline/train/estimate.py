"""How much GPU memory a training run needs, before anything is loaded: what the console's
pre-flight compares with each GPU's free memory in place of store space for an online run.

The figure is a sum of named parts, each from the configs and the batch settings alone:
the target's weights (online only: bf16, from its safetensors headers), the drafter's
trainable weights with their gradients and AdamW moments (fp32) and its frozen embedding,
the target's lm_head rows the objective reads, and one micro-batch's activations (the draft
vocabulary's probabilities and each TTT step's logits dominate; online adds the captured
states and one decoder layer's working set). A 20 % margin covers the allocator's slack.

The activation coefficients are the ones an H200 measured with the objective's passes written
out eagerly (bench/results/online-vs-offline-h200-489eb84.txt, torch's peak allocation at 16,384
tokens): each TTT step's draft-vocabulary logits cost fp32's 4 bytes, not bf16's 2, and the
drafter's hidden activations average 3 bytes an element (bf16 and fp32 mixed). Before the
margin, the parts then sit just above those peaks: 24.2 GB against 23.1 for a SmolLM2-135M
target, 63.7 against 62.2 for an 8B one. The compiled passes (pipeline/train/loss_kernels.py,
the CUDA default) peak lower (17.9 and 58.9 GB, online-vs-offline-h200.txt), but a failed
compile falls back to the eager ones, so the estimate covers those.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pipeline.drafter.config import DrafterConfig
from pipeline.records.train_estimate import TrainEstimate
from pipeline.sizes import format_bytes
from pipeline.target.config import read_config, text_config
from pipeline.target.weights import FingerprintError, weight_files
from pipeline.train.options import DEFAULT_BATCH_TOKENS

MARGIN = 1.2
BF16 = 2
FP32 = 4


def _target_params(target: Path, cfg: dict) -> int:
    """Parameters of the target: counted from its safetensors headers, else from its config."""
    try:
        files = [f for f in weight_files(target) if f.suffix == ".safetensors"]
    except FingerprintError:  # no weight files: count from the config instead
        files = []
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100 << 20:
                break
            header = json.loads(fh.read(n))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for d in entry.get("shape", []):
                    count *= int(d)
                total += count
    else:
        if total:
            return total
    h, inter, layers, vocab = (int(cfg[k]) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                      "vocab_size"))
    heads = int(cfg.get("num_attention_heads") or 1)
    head_dim = int(cfg.get("head_dim") or h // heads)
    kv = int(cfg.get("num_key_value_heads") or heads)
    per_layer = h * heads * head_dim * 2 + 2 * h * kv * head_dim + 3 * h * inter
    return vocab * h * (1 if cfg.get("tie_word_embeddings") else 2) + layers * per_layer


def micro_batch_tokens(batch_tokens: int | None, batch_size: int | None, max_len: int) -> int:
    """Padded tokens of the largest micro-batch: --batch-tokens, or --batch-size samples of
    --max-len, or the trainer's default."""
    return batch_tokens or (batch_size * max_len if batch_size else DEFAULT_BATCH_TOKENS)


def estimate(target: Path, online: bool, batch_tokens: int, draft_vocab: int, ttt_length: int,
             max_len: int) -> TrainEstimate:
    target = Path(target)
    cfg = text_config(read_config(target, "--target"))
    d = DrafterConfig.from_target(cfg, draft_vocab, where=str(target / "config.json"))
    h, inter, vd, v = d.hidden_size, d.intermediate_size, d.draft_vocab_size, d.vocab_size
    trainable = 3 * h * h + (2 * h) * h * 3 + h * h + 3 * h * inter + vd * h + 3 * h
    parts = {
        "drafter_and_optimizer": trainable * 16 + v * h * 4,
        "target_head": (v + vd) * h * BF16,
        "activations": batch_tokens * (vd * (4 + 4 + FP32 * ttt_length) + ttt_length * (12 * h + 3 * inter) * 3)
        + min(batch_tokens, 8192) * v * BF16,
    }
    if online:
        parts["target_weights"] = _target_params(target, cfg) * BF16
        parts["target_forward"] = batch_tokens * (4 * h + (6 * h + 3 * inter)) * BF16
    need = int(sum(parts.values()) * MARGIN)
    return TrainEstimate(gpu_bytes=need, parts=parts, online=online, batch_tokens=batch_tokens, max_len=max_len,
                         draft_vocab=vd, ttt_length=ttt_length, margin=MARGIN)


def describe(est: TrainEstimate) -> str:
    parts = ", ".join(f"{k.replace('_', ' ')} {format_bytes(v)}" for k, v in est.parts.items())
    how = "online (the target on the GPU, no store)" if est.online else "offline (states from the store)"
    return (f"train estimate: {format_bytes(est.gpu_bytes)} of GPU memory per rank, {how}, at "
            f"{est.batch_tokens} tokens a micro-batch: {parts}, and a {est.margin - 1:.0%} margin")


def short_share(est: TrainEstimate, share: float, total: int) -> str | None:
    """What a trainer held to `share` of a GPU of `total` bytes says when the estimate needs
    more (a warning): such a run runs out of memory part-way, at its longest batch, not at the start."""
    cap = int(share * total)
    if est.gpu_bytes <= cap:
        return None
    return (f"--gpu-memory-share {share:g} holds this process to {format_bytes(cap)} of the GPU's "
            f"{format_bytes(total)}, and --estimate puts this run at {format_bytes(est.gpu_bytes)} (with its "
            f"{est.margin - 1:.0%} margin); if it runs out of memory, raise the share or lower --batch-tokens")
