"""Where one drafter training step spends its GPU time, by kernel; and the trainer's speed before/after.

The step is pipeline.train's own (step.forward_backward: prepare with the target head, the
TTT objective, backward; step.apply: clipping, the finiteness check, fused AdamW) on random
weights and a resident random batch, so no store or target folder is needed. It prints
ms/step and tokens/s, then the kernels that took the most GPU time over the profiled steps,
grouped into matmuls, attention, and the rest:

    python bench/train_profile.py [--shape llama8b|small|smollm2] [--steps 6] [--attention flash|reference]
                                  [--loss compiled|eager] [--top 25] [--answer-share 0.6] [--code DIR]

`--shape smollm2` is the recipe's step (bench/recipe.py on SmolLM2-135M-Instruct: 8 rows of
2,048 tokens, draft vocabulary 32,000); each row is a prompt then an answer, the answer
`--answer-share` of it (the recipe's data learns 61 % of its tokens). `--code DIR` imports
`pipeline` from DIR instead (an older commit's tree: `git archive 46269d7 pipeline | tar x -C DIR`).
`--attention reference` runs the written-out [T, T+i] softmax for TTT steps >= 1 instead of
the flash merge; `--loss eager` the objective's vocabulary-wide passes uncompiled
(pipeline.train's --no-compile-loss).

Before/after, on one machine in one call (`--speed`): the real trainer of `--old-code DIR` and of
this tree (`python -m pipeline.train` online, the recipe's settings, a random SmolLM2-135M-shaped
target and `--records` synthetic merged records whose prompt and answer lengths follow the recipe's
data), its rate read from its progress events between steps `--rate-from` and `--rate-to` (start-up,
compiles and the last save left out; a validation and a checkpoint at `--trainer-steps`/2 left in
unless `--rate-from` is past it), its GPU kernel time per step traced over 8 steps after that, its
recompiles, and its logged losses against the other's (same seed, data and weights); then the
profiled step of each, last, so that a call cut short keeps the trainers' figures:

    python bench/train_profile.py --speed --old-code .carry/old [--trainer-steps 240] [--records 5000]
                                  [--result bench/results/train-speed-h100.txt] [--commit C]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from evaluate_kv import SMOLLM2_135M, random_target  # noqa: E402
from train import SHAPES, TTT  # noqa: E402

# name: (target config, draft vocab, rows, tokens a row)
PROFILE_SHAPES = {**{k: (cfg, dv, 1, t) for k, (cfg, dv, t) in SHAPES.items()},
                  "smollm2": (SMOLLM2_135M, 32000, 8, 2048)}
RECIPE = ["--batch-tokens", "16384", "--max-len", "2048", "--lr", "1e-3", "--warmup-ratio", "0.02", "--ttt-length", "7",
          "--draft-vocab", "32000", "--val-samples", "200", "--log-every", "10", "--device", "cuda"]
SMOKE = ["--batch-tokens", "1024", "--max-len", "512", "--lr", "1e-3", "--ttt-length", "3", "--draft-vocab", "256",
         "--val-samples", "8", "--log-every", "2", "--workers", "1", "--device", "cpu"]
"""--speed --smoke: the comparison's every part on a CPU in minutes (a tiny target), to try the bench itself."""


def build(a: argparse.Namespace, device: torch.device):
    from pipeline.drafter import vocab as dvocab
    from pipeline.drafter.config import DrafterConfig
    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.train.loss import TargetHead

    cfg, dv, rows, tokens = PROFILE_SHAPES[a.shape]
    rows = a.rows or rows
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
    kernels, merge = step_kernels(drafter, a.loss == "compiled", amp)
    head = TargetHead(head_w, vocab.ids, vocab.t2d, device, amp, kernels)
    g = torch.Generator(device=device).manual_seed(1)
    mask = torch.zeros(rows, tokens, dtype=torch.uint8, device=device)
    mask[:, tokens - round(a.answer_share * tokens):] = 1
    batch = {
        "input_ids": torch.randint(0, v, (rows, tokens), device=device, generator=g),
        "loss_mask": mask,
        "hidden_state": torch.randn(rows, tokens, h, device=device, generator=g).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(rows, tokens, 3 * h, device=device, generator=g).to(torch.bfloat16),
        "lengths": torch.full((rows,), tokens, dtype=torch.int64, device=device),  # the step counts real tokens
    }
    try:  # what the trainer's to_device adds on the host, where the tree has it
        from pipeline.train.loss import scored_positions
    except ImportError:
        pass
    else:
        batch["scored"] = scored_positions(batch["loss_mask"])
    return drafter, head, batch, amp, rows * tokens, kernels, merge


def step_kernels(drafter, compile: bool, amp: torch.dtype):
    """(the loss's kernels, the TTT merge's or None) as setup builds them, in this tree or an older one."""
    try:
        from pipeline.train.drafter_compile import training_kernels
    except ImportError:  # before the drafter was compiled (46269d7): the loss's kernels alone, by their old name
        from pipeline.train.vocab_kernels import VocabKernels

        return VocabKernels(compile=compile), None
    return training_kernels(drafter, compile, amp, print)


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
    p.add_argument("--answer-share", type=float, default=0.6, help="share of each row under the loss mask")
    p.add_argument("--no-profile", action="store_true", help="only the tokens/s figure")
    p.add_argument("--code", type=Path, default=REPO, help="the tree whose pipeline runs (default this one)")
    p.add_argument("--speed", action="store_true", help="before/after: --old-code's step and trainer against ours")
    p.add_argument("--old-code", type=Path, help="--speed: the older tree (a folder holding pipeline/)")
    p.add_argument("--work", type=Path, help="--speed: folder for the target, data and runs (default a temporary one)")
    p.add_argument("--records", type=int, default=5000, help="--speed: synthetic merged records")
    p.add_argument("--trainer-steps", type=int, default=240)
    p.add_argument("--rate-from", type=int, default=20)
    p.add_argument("--rate-to", type=int, default=200)
    p.add_argument("--result", type=Path, help="--speed: also write the report here")
    p.add_argument("--commit", help="--speed: the commit named at the top, where the tree has no .git")
    p.add_argument("--smoke", action="store_true", help="--speed on a CPU: a tiny target and settings (try the bench)")
    p.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)  # internal: run pipeline.train, traced
    p.add_argument("--trace-from", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p.parse_args()


def step_fn(a: argparse.Namespace, device: torch.device) -> tuple[Callable[[], None], int, bool]:
    """(one training step as pipeline.train takes it, on a resident batch; the batch's tokens; whether
    the loss's kernels are compiled)."""
    from pipeline.train import step as steps
    from pipeline.train.dist import Dist
    from pipeline.train.loss import TTTObjective

    try:
        from pipeline.train.finite import FiniteGuard
    except ImportError:  # an older tree: in step.py, or none at all
        FiniteGuard = getattr(steps, "FiniteGuard", None)

    drafter, head, batch, amp, tokens, kernels, merge = build(a, device)
    params = [q for q in drafter.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), fused=True)
    run = SimpleNamespace(opts=SimpleNamespace(ttt_length=TTT, max_grad_norm=0.5), dist=Dist(0, 1, 0, device),
                          device=device, cuda=device.type == "cuda", head=head, amp_dtype=amp, params=params, opt=opt,
                          objective=TTTObjective(drafter, TTT, kernels, *([merge] if merge else [])),
                          stop=threading.Event(), total=1 << 30,
                          sched=torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0), out=Path(tempfile.gettempdir()))
    if FiniteGuard is not None:
        run.guard = FiniteGuard(device)
    done = [0]

    def step() -> None:
        out = steps.forward_backward(run, batch)  # a StepResult, or an older tree's tuple
        steps.apply(run, done[0], out.loss if hasattr(out, "loss") else out[0], batch)
        done[0] += 1

    return step, tokens, kernels.compiled


def kernel_lines(prof, steps: int, top: int) -> list[str]:
    """GPU time per step by category, then the `top` kernels."""
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t > 0 and str(getattr(e, "device_type", "")) != "DeviceType.CPU":  # kernels, not the ops that launched them
            rows.append((t / steps / 1e3, e.count // steps, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    by_cat: dict[str, float] = {}
    for ms, _n, key in rows:
        by_cat[category(key)] = by_cat.get(category(key), 0.0) + ms
    lines = [f"GPU time per step {total:.1f} ms: " + ", ".join(f"{k} {v:.1f} ms ({v / max(total, 1e-9):.0%})"
                                                               for k, v in sorted(by_cat.items(), key=lambda x: -x[1]))]
    return lines + [f"  {ms:7.2f} ms  x{n:<4} {category(key):<9} {key[:110]}" for ms, n, key in rows[:top]]


def profile_step(a: argparse.Namespace) -> int:
    if a.attention == "reference":
        import pipeline.drafter.model as model

        model.flash_supported = lambda _q: False
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and a.shape == "llama8b":
        a.shape = "small"
    cuda = device.type == "cuda"
    step, tokens, compiled = step_fn(a, device)

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
    print(f"train_profile: {a.shape} (H {PROFILE_SHAPES[a.shape][0]['hidden_size']}, {tokens} tokens, "
          f"{a.answer_share:.0%} answer, TTT {TTT}), attention {a.attention}, loss "
          f"{'compiled' if compiled else 'eager'}, {name}, torch {torch.__version__}: {dt * 1e3:.1f} ms/step, "
          f"{tokens / dt:,.0f} tok/s{peak}", flush=True)
    if a.no_profile or not cuda:
        return 0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        sync()
    print("\n".join(kernel_lines(prof, a.steps, a.top)))
    return 0


def host_lines(prof, steps: int, top: int) -> list[str]:
    """Where the host's time went (self CPU time per step): waits on the device, the loader, launches."""
    rows = sorted(((e.self_cpu_time_total / steps / 1e3, e.count // steps, e.key) for e in prof.key_averages()
                   if e.self_cpu_time_total > 0), reverse=True)
    return ["host time per step (self CPU, the tracer's own cost included):"] + [
        f"  {ms:7.2f} ms  x{n:<5} {key[:110]}" for ms, n, key in rows[:top]]


def trainer(a: argparse.Namespace) -> int:
    """pipeline.train's main on `a.rest`, its kernels and host time traced over 8 steps from `a.trace_from`."""
    from torch.profiler import ProfilerActivity, profile

    from pipeline.train import step as steps
    from pipeline.train.__main__ import main

    apply, began = steps.apply, [0.0]
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    first, last = (a.trace_from, a.trace_from + 7) if torch.cuda.is_available() else (-1, -1)

    def traced(run, step: int, *args) -> None:
        if step == first:
            torch.cuda.synchronize()
            prof.start()
            began[0] = time.perf_counter()
        apply(run, step, *args)
        if step == last:
            torch.cuda.synchronize()
            wall = (time.perf_counter() - began[0]) / 8 * 1e3
            prof.stop()
            print(f"traced steps {first + 1}-{last + 1}: {wall:.1f} ms a step under the tracer; "
                  + "\n".join(kernel_lines(prof, 8, a.top) + host_lines(prof, 8, 12)), flush=True)

    steps.apply = traced
    rc = main([x for x in a.rest if x != "--"])
    if torch.cuda.is_available():
        print(f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    return rc


def synthetic_records(path: Path, n: int, vocab: int, seed: int = 0) -> Path:
    """Merged records shaped like the recipe's regenerated data (8.42M tokens over 19,839 records,
    61 % learnt): a prompt of median 120 tokens, then an answer of median 230 cut at 384."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            prompt = min(1664, max(8, round(rng.lognormvariate(math.log(120), 1.0))))
            answer = min(384, max(4, round(rng.lognormvariate(math.log(230), 0.6))))
            ids = [rng.randrange(vocab) for _ in range(prompt + answer)]
            f.write(json.dumps({"id": f"s{i}", "source": "synthetic", "input_ids": ids,
                                "loss_mask": [0] * prompt + [1] * answer}) + "\n")
    return path


def child(code: Path, argv: list[str], log: Path, env: dict | None = None, timeout: float = 600) -> str:
    """This script run in its own interpreter against `code`; its stdout (stderr to `log`)."""
    with open(log, "w") as err:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--code", str(code), *argv],
                              env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=err, text=True,
                              timeout=timeout, cwd=str(REPO))
    if done.returncode != 0:
        tail = log.read_text()[-1500:]
        raise SystemExit(f"train_profile: {' '.join(argv[:3])} against {code} exited {done.returncode}:\n{tail}")
    return done.stdout


def own_cache(work: Path, label: str) -> dict[str, str]:
    """A torch.compile cache for each tree: a graph one tree compiled (cuDNN's attention chosen
    inside it, say) is never the other's, whose key it may share."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{label}")}


def trainer_figures(events: Path, traced: str, err: Path, a: argparse.Namespace) -> dict:
    from pipeline.events import iter_events

    rows = list(iter_events(events))
    prog = [(r.get("done"), r.t, r.get("tokens", 0)) for r in rows if r.kind == "progress"]
    lo = min((p for p in prog if p[0] >= a.rate_from), key=lambda p: p[0])
    hi = max((p for p in prog if p[0] <= a.rate_to), key=lambda p: p[0])
    loss = {r.get("step"): r.get("value") for r in rows if r.kind == "metric" and r.get("name") == "loss"}
    val = [r.get("value") for r in rows if r.kind == "metric" and r.get("name") == "val_loss"]
    peak = [x.split()[1] for x in traced.splitlines() if x.startswith("peak ")]
    if hi[0] <= lo[0]:
        raise SystemExit(f"train_profile --speed: no two progress events between steps {a.rate_from} and {a.rate_to} "
                         f"in {events} (one every --log-every steps): widen --rate-from..--rate-to")
    rate = (hi[0] - lo[0]) / (hi[1] - lo[1])
    return {"rate": rate, "ms": 1e3 / rate, "tok_s": (hi[2] - lo[2]) / (hi[1] - lo[1]), "loss": loss, "val": val,
            "peak": float(peak[-1]) if peak else 0.0, "window": f"{lo[0]}-{hi[0]}",
            "recompiles": sum("Recompiling function" in line for line in err.read_text().splitlines())}


def speed(a: argparse.Namespace) -> int:
    from result_log import Log, commit, utc_now

    if not a.old_code or not (a.old_code / "pipeline").is_dir():
        raise SystemExit("train_profile --speed: --old-code must be a folder holding the older tree's pipeline/")
    if not a.rate_from < a.rate_to <= a.trainer_steps - 13:
        raise SystemExit("train_profile --speed: need --rate-from < --rate-to <= --trainer-steps - 13 (8 traced steps after)")
    log = Log(a.result)
    work = a.work or Path(tempfile.mkdtemp(prefix="train-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    log("# " + " ".join(["python", "bench/train_profile.py", *sys.argv[1:]]))
    log(f"# commit {commit(a.commit, a.result)} (after) against {a.old_code} (before); {utc_now()}, "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}, torch {torch.__version__}")
    codes = (("before", a.old_code.resolve()), ("after", REPO))
    if a.smoke:
        from evaluate_speed import TINY, build_target

        target, vocab, settings = build_target(work / "target", "tiny"), TINY["vocab_size"], SMOKE
    else:
        target, vocab, settings = random_target(work / "target"), SMOLLM2_135M["vocab_size"], RECIPE
    data = synthetic_records(work / "train.jsonl", a.records, vocab)
    log(f"\n## the real trainer: python -m pipeline.train --data ({a.records} synthetic records) --target (random "
        f"{'tiny' if a.smoke else 'SmolLM2-135M'} shape) --steps {a.trainer_steps} --save-every "
        f"{a.trainer_steps // 2} {' '.join(settings)}")
    figs = {}
    for label, code in codes:
        out, events, err = work / f"run-{label}", work / f"events-{label}.jsonl", work / f"trainer-{label}.log"
        events.unlink(missing_ok=True)
        # synthetic records have no merge stats and the random target no tokenizer: a tree that checks them is told not to
        unchecked = ["--stats", "none"] if (code / "pipeline" / "target" / "tokenizer.py").is_file() else []
        args = ["--data", str(data), "--target", str(target), "--out", str(out), "--steps", str(a.trainer_steps),
                "--save-every", str(a.trainer_steps // 2), "--overwrite", *settings, *unchecked]
        traced = child(code, ["--trainer", "--trace-from", str(a.rate_to + 5), "--top", str(a.top), "--", *args], err,
                       env={"EAGLE3_EVENTS": str(events), "TORCH_LOGS": "recompiles", **own_cache(work, label)})
        figs[label] = f = trainer_figures(events, traced, err, a)
        log(f"{label}: {f['rate']:.2f} steps/s ({f['ms']:.1f} ms a step, steps {f['window']}), {f['tok_s']:,.0f} real "
            f"tokens/s, peak {f['peak']:.1f} GiB, {f['recompiles']} recompiles; loss at step {max(f['loss'])} "
            f"{f['loss'][max(f['loss'])]:.4f}, val loss " + " ".join(f"{v:.4f}" for v in f["val"]))
        log("\n".join("  " + x for x in traced.splitlines()
                       if x.strip() and not x.startswith("peak ") and (not x.startswith("train:") or "warning" in x)))
    b, f = figs["before"], figs["after"]
    common = sorted(set(b["loss"]) & set(f["loss"]))
    worst = max(abs(f["loss"][s] - b["loss"][s]) / max(abs(b["loss"][s]), 1e-9) for s in common)
    log(f"after/before: {f['rate'] / b['rate']:.2f}x the steps a second; logged losses (steps {common[0]}-{common[-1]}) "
        f"differ by at most {worst:.2%}")
    log("\n## the profiled step (bench/train_profile.py --shape smollm2, loss compiled, step.forward_backward + apply)")
    ms, shape = {}, ["--shape", "small", "--rows", "2"] if a.smoke else ["--shape", "smollm2"]
    for label, code in codes:
        out = child(code, [*shape, "--steps", str(a.steps), "--top", str(a.top), "--answer-share", str(a.answer_share)],
                    work / f"profile-{label}.log", env=own_cache(work, label))
        lines = [x for x in out.splitlines() if x.strip()]
        ms[label] = float(next(x for x in lines if x.startswith("train_profile:")).split(": ")[-1].split(" ms/step")[0])
        log(f"{label}: " + "\n".join(lines))
    log(f"after/before: {ms['before'] / ms['after']:.2f}x the steps a second")
    return 0


def main() -> int:
    a = parse_args()
    if a.speed:
        return speed(a)
    sys.path.insert(0, str(a.code.resolve()))
    return trainer(a) if a.trainer else profile_step(a)


if __name__ == "__main__":
    sys.exit(main())
