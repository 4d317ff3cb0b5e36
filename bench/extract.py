"""Extraction throughput and memory on a GPU: end to end against forward-only, checksums on.

One run measures, on a random-weight Llama-3.1-8B-shaped target and 2048-token samples:
  1. forward-only tokens/s and peak GPU memory (torch.cuda.max_memory_allocated, weights
     included) of three captures: `output_hidden_states=True` (the old capture), pre-hooks
     on the three capture layers (eager), and hooks with torch.compile'd decoder layers (the
     default on CUDA), plus the compile time and the largest difference compiled vs eager;
  2. xxh3 checksum speed on one core, and write GB/s to the output disk (one plain file with
     fsync; the store's own sample writer, temp + fsync + rename + checksum, on threads);
  3. end to end: pipeline.extract's engine over --samples samples into a fresh store, with
     checksums (the default) and without (a no-op checksum), compiled; and uncompiled with
     checksums (--no-eager-e2e skips it).
Targets: end to end with checksums >= 40k tokens/s on one H200, and >= 0.95 x forward-only.
Scaling over several GPUs is the product's to show: the extract stage's shards as phases under
`eagle3 run --parallel N`, not a runner here. Needs CUDA; run from the repository root:

    PYTHONUNBUFFERED=1 python bench/extract.py --out /path/on/the/disk
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pipeline.events import EventWriter  # noqa: E402
from pipeline.extract import engine  # noqa: E402
from pipeline.capture import Capturer  # noqa: E402
from pipeline.extract.job import prepare  # noqa: E402
from pipeline.extract.options import Options  # noqa: E402
from pipeline.store.layout import sample_bytes  # noqa: E402
from pipeline.store.meta import TargetInfo  # noqa: E402
from pipeline.extract.reserve import volume_of  # noqa: E402
from pipeline.extract.sharding import Shard  # noqa: E402
from pipeline.store import sample_file as store_module  # noqa: E402
from store_bound import store_write  # noqa: E402

SEQ = 2048
DEVICE = "cuda:0"
LLAMA_31_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                   rope_theta=500000.0, rms_norm_eps=1e-5,
                   rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"})
SHAPE = dict(LLAMA_31_8B)
SMOKE = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)


def log(msg: str) -> None:
    print(msg, flush=True)


def build_target():
    """Random bf16 weights made on the GPU (seconds, not a CPU init of 8B parameters)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPE, attn_implementation="sdpa")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    sync()
    return model.eval()


def sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def pinned(t: torch.Tensor) -> torch.Tensor:
    return t.pin_memory() if DEVICE.startswith("cuda") else t


def target_info() -> TargetInfo:
    return TargetInfo(path="random:llama-3.1-8b-shape", model_type="llama", num_layers=SHAPE["num_hidden_layers"],
                      hidden_size=SHAPE["hidden_size"], vocab_size=SHAPE["vocab_size"],
                      fingerprint="random:llama-3.1-8b-shape")


def write_dataset(path: Path, n: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(n):
            ids = [rng.randrange(SHAPE["vocab_size"]) for _ in range(SEQ)]
            f.write(json.dumps({"id": f"bench-{i}", "source": "bench", "input_ids": ids,
                                "loss_mask": [1] * SEQ}) + "\n")


def reset_peak() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if DEVICE.startswith("cuda") else float("nan")


class HiddenStatesCapture:
    """The capture as it was before hooks: output_hidden_states=True keeps every layer's states."""

    def __init__(self, model, layers: list[int]) -> None:
        self.base, self.layers = model.base_model, layers

    @torch.inference_mode()
    def forward(self, input_ids, lengths):
        x = input_ids.to(DEVICE, non_blocking=True)
        out = self.base(input_ids=x, use_cache=False, output_hidden_states=True)
        final = out.last_hidden_state
        aux = torch.cat([out.hidden_states[i] for i in self.layers], dim=-1)
        bad = (~torch.isfinite(final).all(-1)) | (~torch.isfinite(aux).all(-1))
        return final, aux, bad.any(-1)

    def close(self) -> None:
        pass


def forward_only(cap, batch_tokens: int, warmup: int, iters: int) -> dict:
    """tokens/s, peak GiB and the first call's seconds (compilation) of one capture."""
    info = target_info()
    b = max(1, batch_tokens // SEQ)
    x = pinned(torch.randint(0, info.vocab_size, (b, SEQ), dtype=torch.int64, generator=torch.Generator().manual_seed(1)))
    reset_peak()
    t = time.perf_counter()
    first = cap.forward(x, [SEQ] * b)
    sync()
    first_s = time.perf_counter() - t
    sample = (first[0][0, :64].float().cpu(), first[1][0, :64].float().cpu())
    del first
    for _ in range(warmup):
        cap.forward(x, [SEQ] * b)
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        final, aux, bad = cap.forward(x, [SEQ] * b)
        del final, aux, bad
    sync()
    rate = b * SEQ * iters / (time.perf_counter() - t)
    return {"tokens_per_s": rate, "peak_gib": peak_gib(), "first_s": first_s, "sample": sample}


def accuracy(model, batch: int = 2) -> None:
    """How far eager and compiled bf16 captures are from the same weights run in fp32:
    relative L2 error per captured state (final, and each capture layer's third of aux)."""
    info = target_info()
    layers = info.capture_layers
    h = info.hidden_size
    x = pinned(torch.randint(0, info.vocab_size, (batch, SEQ), dtype=torch.int64,
                             generator=torch.Generator().manual_seed(2)))
    got = {}
    for label, compile in (("eager bf16", False), ("compiled bf16", True)):
        cap = Capturer(model, layers, info.num_layers, DEVICE, compile=compile, log=log)
        final, aux, _ = cap.forward(x, [SEQ] * batch)
        got[label] = (final.float(), aux.float())
        cap.close()
    model.float()
    cap = Capturer(model, layers, info.num_layers, DEVICE, compile=False, log=log)
    ref_final, ref_aux = cap.forward(x, [SEQ] * batch)[:2]
    cap.close()
    model.to(torch.bfloat16)

    def rel(a, b) -> float:
        return float((a - b).norm() / b.norm())

    for label, (final, aux) in got.items():
        parts = [f"final {rel(final, ref_final):.4f}"]
        parts += [f"layer {n} input {rel(aux[..., k * h:(k + 1) * h], ref_aux[..., k * h:(k + 1) * h]):.4f}"
                  for k, n in enumerate(layers)]
        log(f"[0] relative L2 error against fp32, {label}: " + ", ".join(parts))
    e, c = got["eager bf16"], got["compiled bf16"]
    log(f"    compiled vs eager bf16: final {rel(c[0], e[0]):.4f}, aux {rel(c[1], e[1]):.4f}")


def checksum_speed(nbytes: int = 256 << 20) -> float:
    from pipeline.checksum import Checksum

    buf = memoryview(os.urandom(nbytes))
    t = time.perf_counter()
    h = Checksum()
    for i in range(0, nbytes, 16 << 20):
        h.update(buf[i:i + (16 << 20)])
    h.hexdigest()
    return nbytes / (time.perf_counter() - t) / 1e9


class NoChecksum:
    """Stands in for pipeline.checksum.Checksum to measure what checksums cost end to end."""

    def update(self, buf) -> None:
        pass

    def hexdigest(self) -> str:
        return "0" * 16


def sequential_write(folder: Path, total: int, chunk: int = 64 << 20) -> float:
    buf = memoryview(os.urandom(chunk))
    path = folder / "seq-write.bin"
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    while written < total:
        written += os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    gbps = written / (time.perf_counter() - t) / 1e9
    path.unlink()
    return gbps


def extract_run(model, data: Path, out: Path, limit: int, shard: Shard, args, compile: bool | None = None,
                checksums: bool = True) -> dict:
    opts = Options(data=data, out=out, batch_tokens=args.batch_tokens, writers=args.writers,
                          queue=args.queue, reserve=args.reserve, limit=limit)
    job = prepare(opts, target_info(), "bfloat16", shard)
    real = store_module.Checksum
    if not checksums:
        store_module.Checksum = NoChecksum
    reset_peak()
    try:
        start = time.time()
        res = engine.run(job, model, DEVICE, EventWriter(None), log=log, compile=compile)
        end = time.time()
    finally:
        store_module.Checksum = real
        job.lock.release()
    return {"rank": shard.rank, "tokens": res.tokens, "bytes": res.bytes, "samples": res.samples,
            "seconds": res.seconds, "start": start, "end": end, "complete": res.complete, "peak_gib": peak_gib()}


def disk_report(out: Path) -> str:
    vol = volume_of(out)
    dev = fstype = "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[1] == vol:
                dev, fstype = parts[0], parts[2]
    st = os.statvfs(out)
    return f"{out} on {vol} ({dev}, {fstype}), {st.f_bavail * st.f_frsize / 1e9:.0f} GB free"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder on the disk to measure (not tmpfs)")
    p.add_argument("--samples", type=int, default=320, help="2048-token samples for the single-GPU run")
    p.add_argument("--batch-tokens", type=int, default=16384)
    p.add_argument("--writers", type=int, default=0, help="writer threads (default 8)")
    p.add_argument("--iters", type=int, default=10, help="timed forwards per forward-only figure")
    p.add_argument("--accuracy", action="store_true",
                   help="only: eager and compiled bf16 captures against the same weights in fp32, then exit")
    p.add_argument("--no-eager-e2e", dest="eager_e2e", action="store_false",
                   help="skip the uncompiled end-to-end run")
    p.add_argument("--queue", type=int, default=4)
    p.add_argument("--reserve", type=int, default=2 * 10**9)
    p.add_argument("--smoke", action="store_true", help="tiny model, 64-token samples, CPU if no GPU: checks the script")
    return p.parse_args()


def forward_figures(model, args) -> float:
    """[1]: the three captures' forward-only figures; returns the rate end to end is held to
    (the compiled capture's, or the eager one's where compiling did not happen)."""
    info = target_info()
    layers = info.capture_layers
    it = dict(warmup=3, iters=args.iters)
    old = forward_only(HiddenStatesCapture(model, layers), args.batch_tokens, **it)
    log(f"[1] forward-only, output_hidden_states=True (the old capture): {old['tokens_per_s']:,.0f} tokens/s, "
        f"peak GPU memory {old['peak_gib']:.1f} GiB")
    eager_cap = Capturer(model, layers, info.num_layers, DEVICE, compile=False, log=log)
    eager = forward_only(eager_cap, args.batch_tokens, **it)
    eager_cap.close()
    log(f"    forward-only, pre-hooks on the capture layers, eager: {eager['tokens_per_s']:,.0f} tokens/s, "
        f"peak GPU memory {eager['peak_gib']:.1f} GiB")
    comp_cap = Capturer(model, layers, info.num_layers, DEVICE, compile=None, log=log)
    comp = forward_only(comp_cap, args.batch_tokens, **it)
    compiled_ok = comp_cap.compiled
    comp_cap.close()
    diff = max(float((a - b).abs().max()) for a, b in zip(comp["sample"], eager["sample"]))
    scale = max(float(b.abs().max()) for b in eager["sample"])
    log(f"    forward-only, hooks + torch.compile'd decoder layers ({'compiled' if compiled_ok else 'NOT compiled'}, "
        f"first batch {comp['first_s']:.1f} s): {comp['tokens_per_s']:,.0f} tokens/s, peak GPU memory "
        f"{comp['peak_gib']:.1f} GiB; largest difference to eager {diff:.3g} (values up to {scale:.3g})")
    try:
        from torch._dynamo.utils import counters

        log(f"    dynamo: {dict(counters['stats'])}, graph breaks {sum(counters['graph_break'].values())}")
    except Exception as e:  # noqa: BLE001 - a figure, not the bench
        log(f"    dynamo counters unavailable: {e}")
    log(f"    peak GPU memory of the forward: {old['peak_gib']:.1f} GiB before (output_hidden_states), "
        f"{comp['peak_gib']:.1f} GiB now")
    return comp["tokens_per_s"] if compiled_ok else eager["tokens_per_s"]


def write_figures(out: Path, args, per_token: float) -> float:
    """[2]: checksum and disk speeds; returns the write bound in tokens/s. Sets args.writers
    to the thread count the end-to-end runs use."""
    log(f"[2] xxh3 checksum on one core: {checksum_speed():.1f} GB/s")
    seq = sequential_write(out, (2 << 30) if not args.smoke else (64 << 20))
    log(f"    write, one sequential file + fsync: {seq:.2f} GB/s")
    args.writers = args.writers or 8
    st = store_write(out, 48 if not args.smoke else 16, args.writers, SEQ, SHAPE["hidden_size"],
                     SHAPE["vocab_size"], pin=DEVICE.startswith("cuda"))
    log(f"    write, store sample files ({args.writers} threads, temp+fsync+rename+checksum): {st:.2f} GB/s")
    write_gbps = max(seq, st)
    write_bound = write_gbps * 1e9 / per_token
    log(f"    write-bound: {write_bound:,.0f} tokens/s at {write_gbps:.2f} GB/s")
    return write_bound


def end_to_end_figures(model, out: Path, args, fwd: float, write_bound: float) -> float:
    """[3]: the engine into a fresh store, compiled with and without checksums (and eager);
    returns the compiled-with-checksums rate, the one the targets are about."""
    runs = [("compiled, checksums on", None, True), ("compiled, checksums off", None, False)]
    if args.eager_e2e:
        runs.append(("eager, checksums on", False, True))
    e2e: dict[str, float] = {}
    for label, compile, checksums in runs:
        res = extract_run(model, out / "data.jsonl", out / "store", args.samples, Shard(0, 1), args,
                          compile=compile, checksums=checksums)
        rate = res["tokens"] / res["seconds"]
        e2e[label] = rate
        log(f"[3] end to end, {label}: {res['samples']} samples, {res['tokens']:,} tokens, "
            f"{res['bytes'] / 1e9:.1f} GB in {res['seconds']:.1f} s: {rate:,.0f} tokens/s "
            f"({res['bytes'] / res['seconds'] / 1e9:.2f} GB/s), peak GPU memory {res['peak_gib']:.1f} GiB")
        shutil.rmtree(out / "store")
    main_rate = e2e["compiled, checksums on"]
    e2e_ratio = main_rate / fwd
    log(f"    checksums cost {1 - main_rate / e2e['compiled, checksums off']:+.1%} of end-to-end throughput")
    log(f"    end to end with checksums {main_rate:,.0f} tokens/s (target >= 40,000: "
        f"{'MET' if main_rate >= 40000 else 'MISSED'}); {e2e_ratio:.3f} x forward-only {fwd:,.0f} "
        f"(target >= 0.950: {'MET' if e2e_ratio >= 0.95 else 'MISSED'}); write-bound {write_bound:,.0f}")
    return main_rate


def main() -> None:
    args = parse_args()
    global SEQ, DEVICE
    DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"
    if args.smoke:
        SEQ = 64
        SHAPE.clear()
        SHAPE.update(SMOKE)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    import transformers

    gpu = f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}" if DEVICE != "cpu" else "CPU"
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {gpu}")
    log(f"output disk: {disk_report(out)}")
    per_token = sample_bytes(SEQ, SHAPE["hidden_size"], "bfloat16") / SEQ
    log(f"bytes per token written: {per_token:,.0f}")

    t = time.perf_counter()
    write_dataset(out / "data.jsonl", args.samples)
    log(f"dataset written in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    model = build_target()
    log(f"random {'8B' if not args.smoke else 'tiny'} target built on {DEVICE} in {time.perf_counter() - t:.1f} s")

    if args.accuracy:
        accuracy(model)
        shutil.rmtree(out)
        return
    fwd = forward_figures(model, args)
    write_bound = write_figures(out, args, per_token)
    end_to_end_figures(model, out, args, fwd, write_bound)
    del model
    if DEVICE != "cpu":
        torch.cuda.empty_cache()
    shutil.rmtree(out)


if __name__ == "__main__":
    main()
