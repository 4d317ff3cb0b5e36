"""Drafter training throughput: our trainer from disk, from memory, and SpecForge 0.2.0's.

One run, for a drafter of a Llama-3.1-8B-shaped target (H 4096, vocab 128256, draft vocab
32000, 2048-token samples, random weights), measures training tokens/s of:
  1. ours-disk:    `pipeline.train`'s own run() reading a synthetic store written with the
                   extraction writer (its files leave the page cache as they are written,
                   so training reads them from the disk);
  2. ours-memory:  the same drafter, objective and optimiser step fed from batches already
                   on the GPU (the ceiling for 1.; target: disk >= 0.9 x memory);
  3. specforge:    SpecForge 0.2.0 as its offline training runs it, fed from the GPU:
                   `OnlineEagle3Model` over its `LlamaForCausalLMEagle3` (bf16, attention
                   backend flex_attention, its default), `Eagle3TrainStrategy` with the
                   frozen `TargetHead` over stored hidden states, its `BF16Optimizer` and
                   FSDP backend under `TrainerCore` (target: ours >= 1.0x, aim 1.5x);
then the same three on two GPUs (torchrun, DDP for ours, FSDP for SpecForge). Same tokens
per step for all: one 2048-token sample per GPU, TTT length 7. The target folder holds
only config.json and the embedding + lm_head (bf16), which is all either trainer reads.

    PYTHONUNBUFFERED=1 python bench/train.py --work /local/disk/dir [--gpus 1 2]
    python bench/train.py --small          (CPU, tiny shapes: a sanity run in seconds; no SpecForge)

SpecForge comes from its wheel (`pip install --no-deps specforge==0.2.0`); where it cannot
be imported (no triton on CPU) its line says why. Each measurement runs in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

LLAMA_31_8B = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
               "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
               "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                                   "rope_theta": 500000.0}}
SMALL = {**LLAMA_31_8B, "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048}
SHAPES = {"llama8b": (LLAMA_31_8B, 32000, 2048), "small": (SMALL, 256, 128)}  # config, draft vocab, tokens
TTT = 7
RESULT = "RESULT "


def log(msg: str) -> None:
    print(msg, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- inputs: a head-only target and a synthetic store ---------------------------------------------

def build_target(folder: Path, cfg: dict, device: str) -> None:
    """config.json + model.safetensors (embed_tokens, lm_head; bf16) + its index."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    v, h = cfg["vocab_size"], cfg["hidden_size"]
    g = torch.Generator(device=device).manual_seed(0)
    embed = (torch.randn(v, h, generator=g, device=device) * 0.02).to(torch.bfloat16).cpu()
    head = (torch.randn(v, h, generator=g, device=device) * 0.02).to(torch.bfloat16).cpu()
    names = {"model.embed_tokens.weight": embed, "lm_head.weight": head}
    save_file(names, str(folder / "model.safetensors"), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, "model.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "torch_dtype": "bfloat16", **cfg}))


def zipf_ids(n: int, vocab: int, g: torch.Generator, device: str) -> torch.Tensor:
    """Token ids with a long tail, so the draft vocabulary is a real top-k of the counts."""
    ranks = torch.rand(n, generator=g, device=device).pow(3.0)
    return (ranks * (vocab - 1)).long().clamp(0, vocab - 1).cpu()


def build_store(out: Path, target: Path, cfg: dict, samples: int, tokens: int, device: str) -> int:
    """`samples` samples of `tokens` tokens through the extraction's own writer, manifest and meta."""
    from pipeline.atomic_io import write_json_atomic
    from pipeline.store.manifest import ManifestWriter, finalize
    from pipeline.store.meta import TargetInfo, build_meta
    from pipeline.store.sample_file import Sample, write_sample

    h = cfg["hidden_size"]
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator(device=device).manual_seed(1)
    manifest = ManifestWriter(out, 0, 1)
    written = 0
    for i in range(samples):
        ids = zipf_ids(tokens, cfg["vocab_size"], g, device)
        mask = torch.ones(tokens, dtype=torch.uint8)
        mask[: tokens // 10] = 0
        final = torch.randn(tokens, h, generator=g, device=device).to(torch.bfloat16).cpu()
        aux = torch.randn(tokens, 3 * h, generator=g, device=device).to(torch.bfloat16).cpu()
        entry = write_sample(out, Sample(i, f"s{i}", ids, mask, final, aux), h)
        manifest.add(entry)
        written += entry["bytes"]
    manifest.close()
    finalize(out, samples)
    dataset = out / "synthetic.jsonl"
    dataset.write_text("")
    meta = build_meta(TargetInfo.from_dir(target), "bfloat16", dataset, "synthetic", samples, None, 1)
    write_json_atomic(out / "meta.json", meta)
    return written


# ---- workers ---------------------------------------------------------------------------------------

def _env_rank() -> tuple[int, int, int]:
    env = os.environ
    return int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0"))


def _device(local: int, want: str) -> torch.device:
    if want == "cpu":
        return torch.device("cpu")
    d = torch.device(f"cuda:{local}")
    torch.cuda.set_device(d)
    return d


def _window_rate(events: Path, warmup: int) -> tuple[float, int]:
    """Tokens/s over the log windows after `warmup` steps, from pipeline.train's events."""
    from pipeline.events import iter_events

    progress = [e for e in iter_events(events) if e.kind == "progress"]
    rates = {e.get("step"): e.get("value") for e in iter_events(events)
             if e.kind == "metric" and e.get("name") == "tokens_per_s"}
    tokens = seconds = 0.0
    prev_tokens = 0
    for p in progress:
        step, total_tokens = p.get("done"), p.get("tokens")
        window = total_tokens - prev_tokens
        prev_tokens = total_tokens
        if step > warmup and rates.get(step):
            tokens += window
            seconds += window / rates[step]
    return (tokens / seconds if seconds else float("nan")), int(tokens)


def role_ours_disk(a: argparse.Namespace) -> dict:
    """pipeline.train's run(), unchanged, on the store on disk."""
    from pipeline.train.loop import Options, run

    rank, world, _ = _env_rank()
    events = Path(a.work) / f"events-disk-{world}.jsonl"
    if rank == 0:
        events.unlink(missing_ok=True)
        os.environ["EAGLE3_EVENTS"] = str(events)
    _, dv, tokens = SHAPES[a.shape]
    opts = Options(store=Path(a.work) / "store", target=Path(a.work) / "target", out=Path(a.work) / f"run-{world}",
                   draft_vocab=dv, ttt_length=TTT, steps=a.warmup + a.steps, batch_tokens=tokens, max_len=tokens,
                   log_every=a.log_every, save_every=10**8, keep_last=1, workers=a.workers, prefetch=4,
                   overwrite=True, device=a.device, checksums="none")
    began = time.monotonic()
    summary = run(opts, log=lambda s: None)
    if rank != 0:
        return {}
    rate, counted = _window_rate(events, a.warmup)
    return {"tokens_per_s": rate, "tokens_timed": counted, "wall_s": round(time.monotonic() - began, 1),
            "final_loss": summary.loss}


def _our_parts(a: argparse.Namespace, device: torch.device):
    from pipeline.target import tensors as target_tensors
    from pipeline.drafter import vocab as dvocab
    from pipeline.drafter.config import DrafterConfig
    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.train.data import count_loss_tokens, open_store
    from pipeline.train.loss import TargetHead

    work = Path(a.work)
    cfg, dv, _ = SHAPES[a.shape]
    store = open_store(work / "store", work / "target", checksums="none")
    dcfg = DrafterConfig.from_target(cfg, dv)
    vocab = dvocab.from_counts(count_loss_tokens(store, dcfg.vocab_size, 0, 1), dcfg.draft_vocab_size)
    torch.manual_seed(0)
    drafter = Eagle3Drafter(dcfg)
    drafter.set_vocab(vocab)
    head_w = target_tensors.read_lm_head(work / "target")
    drafter.load_embeddings(target_tensors.read_embeddings(work / "target"))
    with torch.no_grad():
        drafter.lm_head.weight.copy_(head_w[vocab.ids].float())
    drafter.to(device)
    amp = torch.bfloat16 if device.type == "cuda" else torch.float32
    return store, drafter, vocab, TargetHead(head_w, vocab.ids, vocab.t2d, device, amp), amp


def _batches_in_memory(store, world: int, rank: int, count: int, tokens: int, device: torch.device) -> list[dict]:
    out = []
    for k in range(count):
        i = (k * world + rank) % store.samples
        b = store.batch([i], tokens)
        out.append({n: t.to(device) for n, t in b.items()})
    return out


def _timed(step, batches: list[dict], warmup: int, device: torch.device, world: int) -> tuple[float, int]:
    for b in batches[:warmup]:
        step(b)
    sync(device)
    if world > 1:
        torch.distributed.barrier()
    t0 = time.perf_counter()
    tokens = 0
    for b in batches[warmup:]:
        step(b)
        tokens += int(b["input_ids"].numel())
    sync(device)
    if world > 1:
        torch.distributed.barrier()
    return tokens * world / (time.perf_counter() - t0), tokens * world


def role_ours_memory(a: argparse.Namespace) -> dict:
    """The step of pipeline.train (prepare, TTT objective, clip, fused AdamW, schedule) on resident batches."""
    from pipeline.train.dist import Dist
    from pipeline.train.schedule import lr_lambda
    from pipeline.train.loss import TTTObjective, prepare, weights

    dist = Dist.from_env(a.device)
    device, world = dist.device, dist.world_size
    store, drafter, _vocab, head, amp = _our_parts(a, device)
    _, _, tokens = SHAPES[a.shape]
    batches = _batches_in_memory(store, world, dist.rank, a.warmup + a.steps, tokens, device)
    objective = dist.wrap(TTTObjective(drafter, TTT))
    params = [p for p in drafter.parameters() if p.requires_grad]
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), fused=True if cuda else None)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(a.warmup + a.steps, 1, 0.0))
    w = weights(TTT, device)

    def step(batch: dict) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            prep = prepare(head, batch, TTT, amp)
            counts = dist.all_reduce_sum(prep.loss_count)
            sums, _correct = objective(prep)
            loss = (w * sums / counts.clamp(min=1)).sum() * world
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        sched.step()

    rate, counted = _timed(step, batches, a.warmup, device, world)
    dist.close()
    return {"tokens_per_s": rate, "tokens_timed": counted} if dist.rank == 0 else {}


def role_specforge(a: argparse.Namespace) -> dict:
    """SpecForge 0.2.0's offline EAGLE-3 step, assembled as its trainer assembles it."""
    rank, world, local = _env_rank()
    device = _device(local, a.device)
    try:
        from specforge.algorithms.eagle3.model import OnlineEagle3Model
        from specforge.distributed import init_distributed
        from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
        from specforge.modeling.target.target_head import TargetHead
        from specforge.optimizer import BF16Optimizer
        from specforge.runtime.contracts import TrainBatch
        from specforge.training.backend import FSDPTrainingBackend, ParallelConfig
        from specforge.training.controller import TrainerCore
        from specforge.training.strategies.base import Eagle3TrainStrategy
        from transformers import LlamaConfig
    except Exception as e:  # noqa: BLE001 - any import failure is reported as the reason for no figure
        return {"skipped": f"specforge not importable: {type(e).__name__}: {e}"}
    init_distributed(timeout=10)
    store, ours, vocab, _head, _amp = _our_parts(a, device)  # the same store, vocabulary and initial head
    cfg, dv, tokens = SHAPES[a.shape]
    dcfg = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("tie_word_embeddings", "num_hidden_layers")},
                       num_hidden_layers=1,
                       draft_vocab_size=dv, pad_token_id=0, tie_word_embeddings=False)
    with torch.device(device):  # initialised on the GPU: seconds instead of a CPU init of 0.9B parameters
        draft = LlamaForCausalLMEagle3(dcfg, attention_backend=a.sf_attention)
    draft.load_embedding(str(Path(a.work) / "target"))
    draft.freeze_embedding()
    with torch.no_grad():
        draft.t2d.copy_(vocab.t2d)
        draft.d2t.copy_(vocab.d2t)
        draft.lm_head.weight.copy_(ours.lm_head.weight)
    del ours
    draft = draft.to(device=device, dtype=torch.bfloat16)
    model = OnlineEagle3Model(draft_model=draft, length=TTT, attention_backend=a.sf_attention).to(
        device=device, dtype=torch.bfloat16)
    target_head = TargetHead.from_pretrained(str(Path(a.work) / "target"))
    total = a.warmup + a.steps
    backend = FSDPTrainingBackend(
        ParallelConfig.from_distributed(),
        optimizer_factory=lambda m: BF16Optimizer(m, lr=1e-4, max_grad_norm=0.5, total_steps=total,
                                                  warmup_ratio=0.015))
    wrapped = backend.prepare_model(model, optimizer_target=model.draft_model)
    core = TrainerCore(Eagle3TrainStrategy(wrapped, target_head=target_head), backend)
    raw = _batches_in_memory(store, world, rank, total, tokens, device)
    batches = [{"input_ids": b["input_ids"], "attention_mask": torch.ones_like(b["input_ids"]),
                "loss_mask": b["loss_mask"].to(torch.int64), "target": b["hidden_state"],
                "hidden_state": b["aux_hidden_state"]} for b in raw]
    del raw

    def step(batch: dict) -> None:
        core.train_step(TrainBatch(sample_ids=["s"], strategy="eagle3", tensors=batch,
                                   metadata={"target_repr": "hidden_state"}))

    rate, counted = _timed(step, batches, a.warmup, device, world)
    torch.distributed.destroy_process_group()
    return {"tokens_per_s": rate, "tokens_timed": counted, "attention_backend": a.sf_attention} if rank == 0 else {}


ROLES = {"ours-disk": role_ours_disk, "ours-memory": role_ours_memory, "specforge": role_specforge}


# ---- orchestration ---------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a: argparse.Namespace, role: str, gpus: int, extra: list[str] | None = None) -> dict:
    args = [__file__, "--role", role, "--work", str(a.work), "--shape", a.shape, "--steps", str(a.steps),
            "--warmup", str(a.warmup), "--device", a.device, "--workers", str(a.workers),
            "--log-every", str(a.log_every), "--sf-attention", a.sf_attention, *(extra or [])]
    env = dict(os.environ)
    if role == "specforge" or gpus > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus),
               "--master-port", str(_free_port()), *args]
    else:
        cmd = [sys.executable, *args]
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    began = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout, check=False)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(RESULT)]
    if p.returncode != 0 or not lines:
        lines = p.stderr.strip().splitlines() or ["(no output)"]
        tail = next((ln for ln in reversed(lines) if "Error" in ln and "ChildFailedError" not in ln), lines[-1])[:300]
        return {"error": f"exit {p.returncode}: {tail}", "wall_s": round(time.monotonic() - began, 1)}
    out = json.loads(lines[-1][len(RESULT):])
    out["process_s"] = round(time.monotonic() - began, 1)
    return out


def fmt(r: dict) -> str:
    if "tokens_per_s" in r:
        backend = f"  [attention {r['attention_backend']}]" if "attention_backend" in r else ""
        return f"{r['tokens_per_s']:>10,.0f} tok/s{backend}"
    return r.get("skipped") or r.get("error") or "no figure"


def orchestrate(a: argparse.Namespace) -> int:
    cfg, dv, tokens = SHAPES[a.shape]
    work = Path(a.work)
    gen_device = "cuda" if a.device == "cuda" else "cpu"
    log(f"bench/train: shape {a.shape} (H {cfg['hidden_size']}, vocab {cfg['vocab_size']}, draft vocab {dv}, "
        f"{tokens}-token samples, TTT {TTT}), {a.warmup} warmup + {a.steps} timed steps of one sample per GPU, "
        f"device {a.device}, torch {torch.__version__}"
        + (f", {torch.cuda.get_device_name(0)}" if a.device == "cuda" else ""))
    if work.exists() and not a.keep:
        shutil.rmtree(work)
    samples = (a.warmup + a.steps) * max(a.gpus)
    if not (work / "store" / "manifest.jsonl").exists():
        t0 = time.monotonic()
        build_target(work / "target", cfg, gen_device)
        nbytes = build_store(work / "store", work / "target", cfg, samples, tokens, gen_device)
        dt = time.monotonic() - t0
        log(f"inputs: head-only target + store of {samples} samples, {nbytes / 1e9:.2f} GB written in {dt:.1f}s "
            "(extraction writer: fsync, then dropped from the page cache)")
    results: dict = {}

    def unit(n: int) -> str:
        return f"{n} {'GPU' if a.device == 'cuda' else 'proc'}{'s' if n > 1 else ''}"

    for gpus in a.gpus:
        for role in ("ours-disk", "ours-memory", "specforge"):
            if role == "specforge" and a.no_specforge:
                r = {"skipped": "--no-specforge"}
            else:
                r = launch(a, role, gpus)
                if role == "specforge" and "error" in r and a.sf_attention != "sdpa":
                    log(f"  {unit(gpus)}  specforge with {a.sf_attention} failed ({r['error']}); trying sdpa")
                    r = launch(a, role, gpus, ["--sf-attention", "sdpa"])
            results[f"{role}@{gpus}"] = r
            log(f"  {unit(gpus)}  {role:<12} {fmt(r)}"
                + (f"   ({r['tokens_timed']:,} tokens timed, process {r['process_s']}s)" if "tokens_timed" in r else ""))
        disk, mem, sf = (results[f"{k}@{gpus}"].get("tokens_per_s") for k in ("ours-disk", "ours-memory", "specforge"))
        if disk and mem:
            log(f"  {unit(gpus)}  disk / memory  = {disk / mem:.3f}  (target >= 0.9)")
        if disk and sf:
            also = f"; ours from memory {mem / sf:.2f}x" if mem else ""
            log(f"  {unit(gpus)}  ours (disk) / SpecForge (memory) = {disk / sf:.2f}x"
                f"  (target >= 1.0, aim 1.5){also}")
    if len(a.gpus) > 1:
        base = results.get(f"ours-disk@{a.gpus[0]}", {}).get("tokens_per_s")
        top = results.get(f"ours-disk@{a.gpus[-1]}", {}).get("tokens_per_s")
        if base and top:
            log(f"  ours (disk) scaling {unit(a.gpus[0])} -> {unit(a.gpus[-1])}: {top / base:.2f}x")
    if a.json:
        print(json.dumps(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/eagle3-bench-train"), help="folder for target, store, runs")
    p.add_argument("--small", action="store_true", help="tiny shapes on the CPU (sanity run)")
    p.add_argument("--shape", choices=sorted(SHAPES), default=None, help=argparse.SUPPRESS)
    p.add_argument("--gpus", type=int, nargs="+", default=[1], help="GPU counts to run, e.g. 1 2 (default 1)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--log-every", type=int, default=5, help="ours-disk: metric window in steps (default 5)")
    p.add_argument("--workers", type=int, default=4, help="ours-disk: loader processes per GPU (default 4)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--sf-attention", default="flex_attention", help="SpecForge attention backend (default its own)")
    p.add_argument("--no-specforge", action="store_true", help="skip the SpecForge measurement")
    p.add_argument("--keep", action="store_true", help="reuse the target and store in --work")
    p.add_argument("--timeout", type=int, default=900, help="seconds per measurement process")
    p.add_argument("--json", action="store_true", help="also print all results as one JSON line")
    p.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.shape = a.shape or ("small" if a.small else "llama8b")
    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.small else "cpu")
    if a.role:
        r = ROLES[a.role](a)
        if r:
            print(RESULT + json.dumps(r), flush=True)
        return 0
    return orchestrate(a)


if __name__ == "__main__":
    sys.exit(main())
