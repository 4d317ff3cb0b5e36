"""Extraction throughput on a GPU: is end-to-end within 10% of its bottleneck?

One run measures, on a random-weight Llama-3.1-8B-shaped target and 2048-token samples:
  1. forward-only tokens/s: the exact forward extraction runs (base model, hidden states,
     aux concat, finiteness check), no copies, no disk;
  2. write GB/s to the output disk: one plain sequential file with fsync, and the store's
     own sample writer (temp + fsync + rename) on --writers threads;
  3. end to end: pipeline.extract's engine over --samples samples into a fresh store.
The target is end to end >= 0.9 x min(forward-only, write-bound tokens/s). With --gpus 2
it then runs two ranks (one process per GPU, sharing the output folder) over twice the
samples and prints the scaling. Needs CUDA; run from the repository root:

    PYTHONUNBUFFERED=1 python bench/extract.py --out /path/on/the/disk [--gpus 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pipeline.events import EventWriter  # noqa: E402
from pipeline.extract import engine  # noqa: E402
from pipeline.extract.capture import Capturer  # noqa: E402
from pipeline.extract.job import ExtractOptions, prepare  # noqa: E402
from pipeline.extract.layout import sample_bytes  # noqa: E402
from pipeline.extract.manifest import read_manifest  # noqa: E402
from pipeline.extract.meta import TargetInfo, capture_layers  # noqa: E402
from pipeline.extract.reserve import volume_of  # noqa: E402
from pipeline.extract.sharding import Shard  # noqa: E402
from pipeline.extract.store import Sample, write_sample  # noqa: E402

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
                      hidden_size=SHAPE["hidden_size"], vocab_size=SHAPE["vocab_size"])


def write_dataset(path: Path, n: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(n):
            ids = [rng.randrange(SHAPE["vocab_size"]) for _ in range(SEQ)]
            f.write(json.dumps({"id": f"bench-{i}", "source": "bench", "input_ids": ids,
                                "loss_mask": [1] * SEQ}) + "\n")


def forward_only(model, batch_tokens: int, warmup: int, iters: int) -> float:
    info = target_info()
    cap = Capturer(model, capture_layers(info.num_layers), info.num_layers, DEVICE)
    b = max(1, batch_tokens // SEQ)
    x = pinned(torch.randint(0, info.vocab_size, (b, SEQ), dtype=torch.int64))
    for _ in range(warmup):
        cap.forward(x, [SEQ] * b)
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        final, aux, bad = cap.forward(x, [SEQ] * b)
        del final, aux, bad
    sync()
    return b * SEQ * iters / (time.perf_counter() - t)


@torch.inference_mode()
def full_forward(model, batch_tokens: int, warmup: int, iters: int) -> float:
    """Reference only: the whole CausalLM with its LM head, as a plain probe would run it."""
    b = max(1, batch_tokens // SEQ)
    x = torch.randint(0, SHAPE["vocab_size"], (b, SEQ), device=DEVICE)
    for _ in range(warmup):
        model(input_ids=x, use_cache=False)
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        model(input_ids=x, use_cache=False)
    sync()
    return b * SEQ * iters / (time.perf_counter() - t)


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


def store_write(folder: Path, files: int, writers: int) -> float:
    h = SHAPE["hidden_size"]
    hidden = pinned(torch.empty(SEQ, 4 * h, dtype=torch.bfloat16).normal_())
    ids = torch.randint(0, SHAPE["vocab_size"], (SEQ,), dtype=torch.int64)
    mask = torch.ones(SEQ, dtype=torch.uint8)
    store = folder / "write-test"
    store.mkdir()

    def one(i: int) -> int:
        s = Sample(index=i, id=str(i), input_ids=ids, loss_mask=mask,
                   hidden_state=hidden.view(-1)[: SEQ * h].view(SEQ, h),
                   aux_hidden_state=hidden.view(-1)[SEQ * h:].view(SEQ, 3 * h))
        return write_sample(store, s, h)[1]

    t = time.perf_counter()
    with ThreadPoolExecutor(writers) as pool:
        total = sum(pool.map(one, range(files)))
    gbps = total / (time.perf_counter() - t) / 1e9
    shutil.rmtree(store)
    return gbps


def extract_run(model, data: Path, out: Path, limit: int, shard: Shard, args) -> dict:
    opts = ExtractOptions(data=data, out=out, batch_tokens=args.batch_tokens, writers=args.writers,
                          queue=args.queue, reserve=args.reserve, limit=limit)
    job = prepare(opts, target_info(), "bfloat16", shard)
    start = time.time()
    res = engine.run(job, model, DEVICE, EventWriter(None), log=log)
    end = time.time()
    return {"rank": shard.rank, "tokens": res.tokens, "bytes": res.bytes, "samples": res.samples,
            "seconds": res.seconds, "start": start, "end": end, "complete": res.complete}


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


def worker(args) -> None:
    """One rank of the sharded run (its GPU chosen by CUDA_VISIBLE_DEVICES)."""
    out = Path(args.out)
    model = build_target()
    fwd = forward_only(model, args.batch_tokens, 3, 8)
    barrier = out / "barrier"
    (barrier / f"ready.{args.rank}").touch()
    deadline = time.time() + 300
    while len(list(barrier.glob("ready.*"))) < args.world_size and time.time() < deadline:
        time.sleep(0.05)
    res = extract_run(model, out / "data.jsonl", out / "store-sharded", 2 * args.samples,
                      Shard(args.rank, args.world_size), args)
    res["forward_tokens_per_s"] = fwd
    (out / f"result.rank{args.rank}.json").write_text(json.dumps(res))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder on the disk to measure (not tmpfs)")
    p.add_argument("--samples", type=int, default=320, help="2048-token samples for the single-GPU run")
    p.add_argument("--batch-tokens", type=int, default=16384)
    p.add_argument("--writers", type=int, default=0, help="writer threads (0: the fastest of 2, 4, 8 in the write test)")
    p.add_argument("--queue", type=int, default=4)
    p.add_argument("--reserve", type=int, default=2 * 10**9)
    p.add_argument("--gpus", type=int, default=1, help="also run the sharded figure on this many GPUs")
    p.add_argument("--role", default="main", choices=["main", "worker"])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="tiny model, 64-token samples, CPU if no GPU: checks the script")
    args = p.parse_args()
    global SEQ, DEVICE
    DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"
    if args.smoke:
        SEQ = 64
        SHAPE.clear()
        SHAPE.update(SMOKE)
    if args.role == "worker":
        worker(args)
        return

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
    write_dataset(out / "data.jsonl", max(args.samples, 2 * args.samples if args.gpus > 1 else 0))
    log(f"dataset written in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    model = build_target()
    log(f"random {'8B' if not args.smoke else 'tiny'} target built on {DEVICE} in {time.perf_counter() - t:.1f} s")

    fwd = forward_only(model, args.batch_tokens, 5, 20)
    log(f"[1] forward-only (extraction forward, bf16, sdpa): {fwd:,.0f} tokens/s")
    ref = full_forward(model, args.batch_tokens, 2, 6)
    log(f"    reference, full CausalLM forward with LM head: {ref:,.0f} tokens/s")

    seq = sequential_write(out, (4 << 30) if not args.smoke else (64 << 20))
    log(f"[2] write, one sequential file + fsync: {seq:.2f} GB/s")
    counts = [args.writers] if args.writers else [2, 4, 8]
    speeds = {}
    for w in counts:
        speeds[w] = store_write(out, 64 if not args.smoke else 16, w)
        log(f"    write, store sample files ({w} threads, temp+fsync+rename): {speeds[w]:.2f} GB/s")
    args.writers = max(speeds, key=speeds.get)
    st = speeds[args.writers]
    log(f"    writer threads used below: {args.writers}")
    write_gbps = max(seq, st)
    write_bound = write_gbps * 1e9 / per_token
    log(f"    write-bound: {write_bound:,.0f} tokens/s at {write_gbps:.2f} GB/s")

    res = extract_run(model, out / "data.jsonl", out / "store", args.samples, Shard(0, 1), args)
    e2e = res["tokens"] / res["seconds"]
    bound = min(fwd, write_bound)
    log(f"[3] end to end: {res['samples']} samples, {res['tokens']:,} tokens, {res['bytes'] / 1e9:.1f} GB in "
        f"{res['seconds']:.1f} s: {e2e:,.0f} tokens/s ({res['bytes'] / res['seconds'] / 1e9:.2f} GB/s)")
    log(f"    bottleneck min(forward {fwd:,.0f}, write {write_bound:,.0f}) = {bound:,.0f} tokens/s; "
        f"end to end is {e2e / bound:.3f} x of it (target >= 0.900): {'MET' if e2e >= 0.9 * bound else 'MISSED'}")
    shutil.rmtree(out / "store")
    del model
    if DEVICE != "cpu":
        torch.cuda.empty_cache()

    if args.gpus > 1:
        n = min(args.gpus, torch.cuda.device_count()) if DEVICE != "cpu" else args.gpus
        (out / "barrier").mkdir()
        procs = []
        for r in range(n):
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(r))
            procs.append(subprocess.Popen([sys.executable, __file__, "--role", "worker", "--rank", str(r),
                                           "--world-size", str(n), "--out", str(out), "--samples", str(args.samples),
                                           "--batch-tokens", str(args.batch_tokens), "--writers", str(args.writers),
                                           "--queue", str(args.queue), "--reserve", str(args.reserve)]
                                          + (["--smoke"] if args.smoke else []), env=env))
        codes = [pr.wait() for pr in procs]
        if any(codes):
            log(f"[4] sharded run failed: worker exit codes {codes}")
            sys.exit(1)
        results = [json.loads((out / f"result.rank{r}.json").read_text()) for r in range(n)]
        tokens = sum(r["tokens"] for r in results)
        nbytes = sum(r["bytes"] for r in results)
        wall = max(r["end"] for r in results) - min(r["start"] for r in results)
        agg = tokens / wall
        done = len(read_manifest(out / "store-sharded"))
        manifest_ok = (out / "store-sharded" / "manifest.jsonl").exists() and done == 2 * args.samples
        for r in results:
            log(f"    rank {r['rank']}: forward-only {r['forward_tokens_per_s']:,.0f} tokens/s, end to end "
                f"{r['tokens'] / r['seconds']:,.0f} tokens/s over {r['samples']} samples")
        log(f"[4] sharded on {n} GPUs, one store: {tokens:,} tokens, {nbytes / 1e9:.1f} GB in {wall:.1f} s: "
            f"{agg:,.0f} tokens/s ({nbytes / wall / 1e9:.2f} GB/s); scaling {agg / e2e:.2f}x over one GPU "
            f"({agg / e2e / n:.0%} of linear); write-bound of the shared disk {write_bound:,.0f} tokens/s; "
            f"manifest complete: {manifest_ok} ({done} samples)")
        shutil.rmtree(out / "store-sharded")
    shutil.rmtree(out)


if __name__ == "__main__":
    main()
