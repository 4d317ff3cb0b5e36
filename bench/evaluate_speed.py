"""How long `pipeline.evaluate` takes for the same chain evaluation before and after
batching and kept greedy references, and what a sweep of settings costs on top.

Runs `python -m pipeline.evaluate` in-process four times on the same prompts, chain 3,1,4:
  1. before: --batch 1, no kept references (one prompt at a time, every reference decoded);
  2. after, first run: --batch B (prompts in lockstep, references decoded as one batch);
  3. after, next run: the same, the references now kept (none decoded);
  4. the sweep --sweep against the kept references;
and checks that runs 1-3 report identical figures. With --old-code DIR, run 1 is instead
`python -m pipeline.evaluate` from another checkout of the project (an older commit's tree,
e.g. `git archive a6110b2 pipeline`), with its own flags: the before of a change, measured
on the same machine, prompts and drafter; its report is read as the evaluate report's record
(pipeline/records/evaluate_report.py), so that checkout's report must hold every field of it. Without --model it builds a random
Llama of SmolLM2-135M-Instruct's shape (--shape 135m) or a tiny one (--shape tiny) and scores
the untrained baseline drafter built from it (--baseline); with --model DIR [--drafter DIR]
it scores the real ones.

    python bench/evaluate_speed.py [--model DIR [--drafter DIR]] [--shape 135m|tiny] [--prompts 20] [--prompts-file F]
        [--new-tokens 128] [--batch 20] [--device cpu|cuda] [--dtype fp32|bf16] [--threads N] [--out FILE]
        [--sweep "3,1,4 5,1,6 5,4,8 7,4,8 7,8,32"] [--sweep-prompts N] [--old-code DIR --old-label TEXT]
        [--commit C]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402

from pipeline.records.evaluate_report import LocalReport, read_report  # noqa: E402

TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048)


def build_target(folder: Path, shape: str) -> Path:
    from evaluate_kv import SMOLLM2_135M
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = dict(SMOLLM2_135M) if shape == "135m" else dict(TINY)
    LlamaForCausalLM(LlamaConfig(**cfg, eos_token_id=cfg["vocab_size"] + 1)).save_pretrained(folder)
    return folder


def write_prompts(path: Path, n: int, vocab: int) -> Path:
    g = torch.Generator().manual_seed(0)
    with open(path, "w") as f:
        for i in range(n):
            ids = torch.randint(3, vocab, (int(torch.randint(16, 64, (1,), generator=g)),), generator=g).tolist()
            f.write(json.dumps({"id": f"p{i}", "input_ids": ids + [1], "loss_mask": [0] * len(ids) + [1]}) + "\n")
    return path


def evaluate(argv: list[str]) -> tuple[float, LocalReport]:
    from pipeline.evaluate.__main__ import main

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"evaluate exited {rc} for {' '.join(argv)}")
    return seconds, read_report(argv[argv.index("--report") + 1])


def evaluate_old(code: Path, argv: list[str]) -> tuple[float, LocalReport]:
    """`pipeline.evaluate` as another checkout has it, in its own interpreter (its modules
    would clash with ours in this one); the time counts the interpreter's start too."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipeline.evaluate", *argv], cwd=code, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{code}: evaluate exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, read_report(argv[argv.index("--report") + 1])


def header(a: argparse.Namespace) -> list[str]:
    from result_log import commit

    return ["# " + " ".join(["python", "bench/evaluate_speed.py", *sys.argv[1:]]),
            f"# commit {commit(a.commit, a.out)}",
            f"# {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime())}, torch {torch.__version__}"
            + (f", {torch.cuda.get_device_name(0)}" if a.device == "cuda" else "")]


FIGURES = ("acceptance_length", "accept_rate", "verify_rounds", "tokens", "target_forwards")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path)
    p.add_argument("--drafter", type=Path)
    p.add_argument("--shape", default="135m", choices=["135m", "tiny"])
    p.add_argument("--prompts", type=int, default=20, help="prompts evaluated (--limit)")
    p.add_argument("--prompts-file", type=Path, help="evaluate's --prompts (default: random merged records)")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sweep", default="3,1,4 5,1,6 5,4,8 7,4,8 7,8,32")
    p.add_argument("--batch", type=int, default=20, help="--batch of the 'after' runs (default 20)")
    p.add_argument("--out", type=Path, help="also write the printed lines here")
    p.add_argument("--sweep-prompts", type=int, help="prompts of the sweep (default --prompts): trees run one "
                   "prompt at a time")
    p.add_argument("--old-code", type=Path, help="run 1 from this checkout's pipeline.evaluate instead")
    p.add_argument("--old-label", default="an older commit", help="what --old-code is, for the report")
    p.add_argument("--commit", help="the commit named at the top, where the tree has no .git")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    lines = header(a)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        target = a.model or build_target(tmp / "target", a.shape)
        vocab = json.loads((target / "config.json").read_text())["vocab_size"]
        prompts = a.prompts_file or write_prompts(tmp / "prompts.jsonl", a.prompts, vocab)
        who = ["--drafter", str(a.drafter)] if a.drafter else ["--baseline"]
        common = [*who, "--target", str(target), "--prompts", str(prompts), "--limit", str(a.prompts),
                  "--max-new-tokens", str(a.new_tokens), "--device", a.device, "--dtype", a.dtype]
        refs = ["--references", str(tmp / "refs")]
        chain = [*common, "--num-steps", "3"]
        if a.old_code:
            before = evaluate_old(a.old_code, [*chain, "--report", str(tmp / "before.json")])
        else:
            before = evaluate([*chain, "--batch", "1", "--report", str(tmp / "before.json")])
        first = evaluate([*chain, "--batch", str(a.batch), *refs, "--report", str(tmp / "first.json")])
        again = evaluate([*chain, "--batch", str(a.batch), *refs, "--report", str(tmp / "again.json")])
        same = all(getattr(r[1], k) == getattr(before[1], k) for r in (first, again) for k in FIGURES)
        lines += timing_lines(a, before, first, again, same)
        emit(lines, a.out)  # what a call cut short at the sweep still brings back
        swept = [*common[: common.index("--limit") + 1], str(a.sweep_prompts or a.prompts),
                 *common[common.index("--limit") + 2:]]
        sweep = evaluate([*swept, "--configs", a.sweep, "--batch", str(a.batch), *refs,
                          "--report", str(tmp / "sweep.json")])
    lines += sweep_lines(a, *sweep)
    print("\n".join(lines))
    emit(lines, a.out)
    return 0 if same else 1


def emit(lines: list[str], out: Path | None) -> None:
    if out:
        out.write_text("\n".join(lines) + "\n")


def timing_lines(a: argparse.Namespace, before, first, again, same: bool) -> list[str]:
    (before_s, b), (first_s, f), (again_s, g) = before, first, again
    lines = [f"target: {a.model or 'random ' + a.shape}; drafter: {a.drafter or 'untrained baseline'}; "
             f"{a.device} {a.dtype}, {torch.get_num_threads()} threads; {a.prompts} prompts x {a.new_tokens} tokens; "
             f"chain 3,1,4"]
    first_label = (f"before: {a.old_label}'s pipeline.evaluate (own interpreter)" if a.old_code
                   else "before: one prompt at a time, every reference decoded")
    for label, secs, r in [(first_label, before_s, b),
                           (f"after, first run: --batch {a.batch}, references decoded in a batch", first_s, f),
                           (f"after, next run: --batch {a.batch}, references kept", again_s, g)]:
        lines.append(f"  {label:<58} {secs:8.1f} s (decode {r.decode_seconds:.1f} s; "
                     f"acceptance length {r.acceptance_length}; rounds {r.verify_rounds}; redecoded one by one "
                     f"{r.redecoded_one_by_one})")
    lines.append(f"  whole run {before_s / first_s:.2f}x / {before_s / again_s:.2f}x faster, decode "
                 f"{b.decode_seconds / max(f.decode_seconds, 1e-9):.2f}x / "
                 f"{b.decode_seconds / max(g.decode_seconds, 1e-9):.2f}x; "
                 f"identical figures: {'yes' if same else 'NO'}")
    return lines


def sweep_lines(a: argparse.Namespace, sweep_s: float, sweep: LocalReport) -> list[str]:
    lines = [f"  sweep {a.sweep} on {a.sweep_prompts or a.prompts} prompts (trees one prompt at a time) with "
             f"kept references: {sweep_s:.1f} s"]
    for r in sweep.settings:
        est = "n/a" if r.speedup_estimate is None else f"~{r.speedup_estimate:.2f}x"
        lines.append(f"    {r.setting:<8} acceptance length {r.acceptance_length:.3f}  rates "
                     f"{' '.join(f'{x:.2f}' for x in r.accept_rate)}  forwards saved {r.target_forwards_saved}  "
                     f"estimate {est}")
    lines.append(f"  best: {sweep.best.flags}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
