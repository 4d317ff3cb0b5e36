"""Where one drafter training step spends its GPU time, by kernel, at bench/train.py's shapes.

The step is pipeline.train's (prepare with the target head, the TTT objective, backward,
clipping, fused AdamW) on random weights and a resident random batch, so no store or
target folder is needed. It prints tokens/s, then the kernels that took the most GPU time
over the profiled steps, grouped into matmuls, attention, and the rest:

    python bench/train_profile.py [--shape llama8b|small|smollm2] [--steps 6] [--attention flash|reference]
                                  [--loss compiled|eager] [--top 25]

`--shape smollm2` is the recipe's step (bench/recipe.py on SmolLM2-135M-Instruct: 8 rows of
2,048 tokens, draft vocabulary 32,000), whose ~0.29 s a step on the H200 (8318748) was far
above what its matmuls and logits should take: the objective's elementwise passes were most
of it (bench/results/train-profile-h200.txt).

`--attention reference` runs the written-out [T, T+i] softmax for TTT steps >= 1 instead
of the flash merge (pipeline/drafter/ttt_attention.py), to measure what the merge saves.
`--loss eager` runs the objective's passes over the [B,T,Vd] logits written out op by op
(pipeline.train's --no-compile-loss) instead of one torch.compile'd kernel each
(pipeline/train/vocab_kernels.py), to measure what the fused kernels save.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

from evaluate_kv import SMOLLM2_135M  # noqa: E402
from train import SHAPES, TTT  # noqa: E402

# name: (target config, draft vocab, rows, tokens a row)
PROFILE_SHAPES = {**{k: (cfg, dv, 1, t) for k, (cfg, dv, t) in SHAPES.items()},
                  "smollm2": (SMOLLM2_135M, 32000, 8, 2048)}


def build(shape: str, device: torch.device, rows_asked: int, kernels):
    from pipeline.drafter import vocab as dvocab
    from pipeline.drafter.config import DrafterConfig
    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.train.loss import TargetHead

    cfg, dv, rows, tokens = PROFILE_SHAPES[shape]
    rows = rows_asked or rows
    dcfg = DrafterConfig.from_target(cfg, dv)
    torch.manual_seed(0)
    with torch.device(device):
        drafter = Eagle3Drafter(dcfg)
    v, h = cfg["vocab_size"], cfg["hidden_size"]
    drafter.load_embeddings(torch.randn(v, h, device=device) * 0.02)
    counts = torch.rand(v).pow(3.0) * 1000
    vocab = dvocab.from_counts(counts.long(), dcfg.draft_vocab_size)
    drafter.set_vocab(vocab)
    head_w = torch.randn(v, h, device=device, dtype=torch.bfloat16) * 0.02
    amp = torch.bfloat16 if device.type == "cuda" else torch.float32
    head = TargetHead(head_w, vocab.ids, vocab.t2d, device, amp, kernels)
    g = torch.Generator(device=device).manual_seed(1)
    batch = {
        "input_ids": torch.randint(0, v, (rows, tokens), device=device, generator=g),
        "loss_mask": torch.ones(rows, tokens, dtype=torch.uint8, device=device),
        "hidden_state": torch.randn(rows, tokens, h, device=device, generator=g).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(rows, tokens, 3 * h, device=device, generator=g).to(torch.bfloat16),
    }
    return drafter, head, batch, amp, rows * tokens


def category(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("gemm", "cutlass", "sm90_xmma", "nvjet", "matmul", "cublas")):
        return "matmul"
    if "flash" in n or "fmha" in n or "attention" in n:
        return "attention"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    return "other"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(PROFILE_SHAPES), default="llama8b")
    p.add_argument("--steps", type=int, default=6, help="timed (and profiled) steps after 3 warmup steps")
    p.add_argument("--attention", choices=["flash", "reference"], default="flash")
    p.add_argument("--loss", choices=["compiled", "eager"], default="compiled",
                   help="the objective's vocabulary-wide passes: torch.compile'd (the CUDA default) or eager")
    p.add_argument("--top", type=int, default=25, help="kernels listed")
    p.add_argument("--rows", type=int, default=0, help="rows of the batch (default the shape's; 1 to try smollm2 on a CPU)")
    p.add_argument("--sync", action="store_true", help="wait for each step's finiteness check on the host, as "
                   "pipeline.train does before its optimiser step (the CPU cannot queue the next step meanwhile)")
    p.add_argument("--no-profile", action="store_true", help="only the tokens/s figure")
    return p.parse_args()


def step_fn(a: argparse.Namespace, device: torch.device, kernels) -> tuple[Callable[[], None], int]:
    """(one training step as pipeline.train takes it, on a resident batch; the batch's tokens)."""
    from pipeline.train.loss import TTTObjective, prepare, weights

    drafter, head, batch, amp, tokens = build(a.shape, device, a.rows, kernels)
    objective = TTTObjective(drafter, TTT, kernels)
    params = [q for q in drafter.parameters() if q.requires_grad]
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), fused=True if cuda else None)
    w = weights(TTT, device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            prep = prepare(head, batch, TTT, amp)
            sums, _correct = objective(prep)
            loss = (w * sums / prep.loss_rows.sum((1, 2)).float().clamp(min=1)).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 0.5)
        if a.sync and not bool(torch.isfinite(torch.stack([loss.detach().float(), norm.float()])).all()):
            raise SystemExit("train_profile: the loss or gradient is not finite")
        opt.step()

    return step, tokens


def print_kernels(prof, steps: int, top: int) -> None:
    """GPU time per step by category, then the `top` kernels."""
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t > 0:
            rows.append((t / steps / 1e3, e.count // steps, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    by_cat: dict[str, float] = {}
    for ms, _n, key in rows:
        by_cat[category(key)] = by_cat.get(category(key), 0.0) + ms
    print(f"GPU time per step {total:.1f} ms: " + ", ".join(f"{k} {v:.1f} ms ({v / total:.0%})"
                                                          for k, v in sorted(by_cat.items(), key=lambda x: -x[1])))
    for ms, n, key in rows[:top]:
        print(f"  {ms:7.2f} ms  x{n:<4} {category(key):<9} {key[:110]}")


def main() -> int:
    a = parse_args()
    if a.attention == "reference":
        import pipeline.drafter.model as model

        model.flash_supported = lambda _q: False
    from pipeline.train.vocab_kernels import VocabKernels

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and a.shape == "llama8b":
        a.shape = "small"
    cuda = device.type == "cuda"
    kernels = VocabKernels(compile=a.loss == "compiled")
    step, tokens = step_fn(a, device, kernels)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    dt = (time.perf_counter() - t0) / a.steps
    peak = f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else ""
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(f"train_profile: {a.shape} (H {PROFILE_SHAPES[a.shape][0]['hidden_size']}, {tokens} tokens, TTT {TTT}), "
          f"attention {a.attention}, loss {'compiled' if kernels.compiled else 'eager'}, "
          f"{'a host sync a step' if a.sync else 'no host sync'}, {name}, torch {torch.__version__}: {dt * 1e3:.1f} ms/step, "
          f"{tokens / dt:,.0f} tok/s{peak}", flush=True)
    if a.no_profile or not cuda:
        return 0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        sync()
    print_kernels(prof, a.steps, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
