"""What the target's KV cache saves pipeline.evaluate, per target forward.

Greedy-decodes --new-tokens after a prompt of --prompt-tokens random ids, twice through
pipeline.evaluate.verifier.Target: with the cache (each forward reads only the new token)
and without (each forward reads the whole sequence). Prints the prefill time, the mean
time of the decode forwards, the positions each computes, and whether both decodes gave
the same tokens. With no --target it times a randomly initialised Llama of
SmolLM2-135M-Instruct's shape (the weights do not change the time):

    python bench/evaluate_kv.py [--target DIR] [--prompt-tokens 256] [--new-tokens 16]
        [--device cpu|cuda] [--dtype fp32|bf16] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)


def random_target(folder: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M, eos_token_id=SMOLLM2_135M["vocab_size"] + 1)).save_pretrained(folder)
    return folder


def decode(target, prompt: list[int], new: int) -> tuple[list[int], float, list[float]]:
    """Greedy tokens, the prefill's seconds, and each decode forward's seconds."""
    seq = list(prompt)
    sync = torch.cuda.synchronize if target.device.type == "cuda" else (lambda: None)
    times = []
    for _ in range(new):
        t0 = time.perf_counter()
        nxt = int(target.step(seq, keep=1).next_ids[-1])
        sync()
        times.append(time.perf_counter() - t0)
        seq.append(nxt)
    target.forget()
    return seq[len(prompt):], times[0], times[1:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", type=Path, help="a save_pretrained folder (default: random SmolLM2-135M shape)")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from pipeline.evaluate.verifier import Target

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.target or random_target(Path(tmp) / "target")
        shape = "random SmolLM2-135M shape" if args.target is None else str(args.target)
        runs = {}
        for cached in (True, False):
            target = Target(folder, args.device, dtype, kv_cache=cached)
            g = torch.Generator().manual_seed(0)
            prompt = torch.randint(0, target.vocab_size, (args.prompt_tokens,), generator=g).tolist()
            decode(target, prompt[:8], 2)  # warm-up: first-call allocations
            target.positions_run = 0
            runs[cached] = (*decode(target, prompt, args.new_tokens), target.positions_run)
            del target
    print(f"target: {shape}; {args.device} {args.dtype}, {torch.get_num_threads()} threads; "
          f"prompt {args.prompt_tokens} tokens, {args.new_tokens} new tokens greedy")
    for cached in (True, False):
        _tokens, prefill, steps, positions = runs[cached]
        mean = sum(steps) / len(steps)
        print(f"  {'KV cache   ' if cached else 'no KV cache'}: prefill {prefill * 1e3:8.1f} ms, decode forward "
              f"{mean * 1e3:8.1f} ms mean (last {steps[-1] * 1e3:.1f} ms), {positions} positions computed")
    speedup = (sum(runs[False][2]) / len(runs[False][2])) / (sum(runs[True][2]) / len(runs[True][2]))
    print(f"  decode forward {speedup:.1f}x faster with the cache; same tokens: "
          f"{'yes' if runs[True][0] == runs[False][0] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
