"""Which attention kernel serves regeneration's decode step best: one query token per slot,
grouped-query heads folded into the query length, a boolean mask per slot over the lane's width.

    python bench/attention_decode.py [--device cuda] [--rows 128 256 1024] [--widths 256 512 2048]
        [--out bench/results/attention-decode-h200.txt]

The H200 profile of the regenerate backend (bench/results/regenerate-profile-h200.txt) shows
cuDNN's flash kernel at ~54 us a call for 128 slots of a 135M target, where reading the keys
and values once takes a few: a flash kernel tiles 64-128 queries and a decode step has 3. This
times the candidates on the backend's own shapes (SmolLM2-135M: 3 KV heads of 64, 9 query
heads; keys a view of a wider slot buffer, as kv_slots.py reads them): SDPA as the backend calls
it today (PyTorch picks the kernel), SDPA held to each of its backends, and a plain
matmul-softmax-matmul. On CUDA each variant is captured as a CUDA graph of 30 calls (a layer
each, as a decode step replays them) and replayed; on the CPU it runs eagerly. Each variant's
largest difference to the float32 reference is printed beside its time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

LAYERS = 30
KV_HEADS, GROUPS, HEAD_DIM = 3, 3, 64


def shapes(rows: int, width: int, device: torch.device, dtype: torch.dtype):
    """q folded [rows, kv, groups, dim]; k, v views [rows, kv, width, dim] of a buffer 2x wider;
    each row's position somewhere in the width; mask [rows, 1, 1, width]."""
    g = torch.Generator(device="cpu").manual_seed(rows * 7919 + width)
    q = torch.randn(rows, KV_HEADS, GROUPS, HEAD_DIM, generator=g).to(device, dtype)
    kb = torch.randn(rows, KV_HEADS, 2 * width + 1, HEAD_DIM, generator=g).to(device, dtype)
    vb = torch.randn(rows, KV_HEADS, 2 * width + 1, HEAD_DIM, generator=g).to(device, dtype)
    pos = torch.randint(width // 4, width, (rows,), generator=g).to(device)
    mask = (torch.arange(width, device=device)[None, :] <= pos[:, None])[:, None, None, :]
    return q, kb[:, :, :width], vb[:, :, :width], mask


def sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=HEAD_DIM ** -0.5)


def held(backend: SDPBackend):
    def call(q, k, v, mask):
        with sdpa_kernel(backend):
            return sdpa(q, k, v, mask)
    return call


def float_mask(q, k, v, mask):
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=HEAD_DIM ** -0.5)


def matmuls(q, k, v, mask):
    """Scores for the few queries, masked, softmax in float32, then the values: reads K and V once."""
    s = torch.matmul(q, k.transpose(-1, -2)).float() * HEAD_DIM ** -0.5
    s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1).to(v.dtype), v)


VARIANTS = {
    "sdpa, PyTorch's choice (today)": sdpa,
    "sdpa held to cuDNN": held(SDPBackend.CUDNN_ATTENTION),
    "sdpa held to efficient": held(SDPBackend.EFFICIENT_ATTENTION),
    "sdpa held to math": held(SDPBackend.MATH),
    "sdpa, additive float mask": float_mask,
    "matmul, softmax, matmul": matmuls,
}


def reference(q, k, v, mask):
    return matmuls(q.float(), k.float(), v.float(), mask)


def timed(fn, args, device: torch.device, repeats: int) -> float:
    """Seconds per call, over `repeats` decode steps of LAYERS calls each."""
    if device.type != "cuda":
        fn(*args)
        t0 = time.perf_counter()
        for _ in range(repeats * LAYERS):
            fn(*args)
        return (time.perf_counter() - t0) / (repeats * LAYERS)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAYERS):
            fn(*args)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / (repeats * LAYERS)


def row(name: str, fn, args, ref, device, repeats: int) -> str:
    try:
        out = fn(*args)
        diff = (out.float() - ref).abs().max().item()
        us = timed(fn, args, device, repeats) * 1e6
        return f"    {name:<32} {us:9.1f} us a call   max |diff| {diff:.2e}"
    except Exception as e:  # noqa: BLE001 - a backend that refuses these shapes is a finding, not a failure
        return f"    {name:<32} refused: {type(e).__name__}: {str(e).splitlines()[0][:90]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", type=int, nargs="+", default=None, help="slots in a lane (default 128 256 1024; CPU 16)")
    p.add_argument("--widths", type=int, nargs="+", default=None, help="lane widths (default 256 512 2048; CPU 256)")
    p.add_argument("--repeats", type=int, default=None, help="decode steps timed (default 50; CPU 2)")
    p.add_argument("--commit", default="")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    rows = a.rows or ([128, 256, 1024] if cuda else [16])
    widths = a.widths or ([256, 512, 2048] if cuda else [256])
    repeats = a.repeats or (50 if cuda else 2)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    lines = [f"# python bench/attention_decode.py {' '.join(argv if argv is not None else sys.argv[1:])}",
             f"# commit {a.commit or 'unknown'}",
             f"# torch {torch.__version__}, {name}, {dtype}; {KV_HEADS} KV heads x {GROUPS} query heads each, "
             f"head dim {HEAD_DIM}; {'a CUDA graph of' if cuda else 'eager,'} {LAYERS} calls a step, {repeats} steps"]
    print("\n".join(lines), flush=True)
    for n in rows:
        for w in widths:
            args = shapes(n, w, device, dtype)
            ref = reference(*args)
            kv_bytes = 2 * n * KV_HEADS * w * HEAD_DIM * args[1].element_size()
            block = [f"  {n} slots x width {w} (keys and values {kv_bytes / 2**20:.1f} MiB a call)"]
            block += [row(label, fn, args, ref, device, repeats) for label, fn in VARIANTS.items()]
            print("\n".join(block), flush=True)
            lines += block
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
