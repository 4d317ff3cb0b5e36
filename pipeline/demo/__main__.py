"""Build the demo's inputs offline from a seed: chat datasets, a tokenizer, a trained target.

    python -m pipeline.demo --out DIR [--seed 0] [--train-steps N] [--quick]

Writes DIR/raw/<source>.jsonl, DIR/tokenizer/, DIR/target/ and, last, DIR/assets.json:
its presence means a complete build. Each folder is built under a temporary name and
exchanged into place (pipeline.output_guard), so an interrupted rebuild never leaves half a
target behind, and a failure leaves no temporary. DIR carries the `.eagle3-writer` marker of
pipeline.demo: an existing DIR that is not empty and lacks it (a model folder, a home
directory named by mistake) is refused with exit 2 before anything is touched; a full disk
exits 3 naming the volume and the bytes needed; Ctrl-C exits 130 and SIGTERM 143, leaving no
temporary (pipeline/program_edge.py). Same seed, same
bytes: data and tokenizer are seeded and the target trains on one thread with
deterministic ops.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from pathlib import Path

from pipeline import output_guard
from pipeline.atomic_io import write_json_atomic
from pipeline.events import EventWriter
from pipeline.program_edge import BadInput, on_sigterm, run_program

WRITER = "pipeline.demo"

QUICK_STEPS = 80
DEFAULT_STEPS = 300


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.demo",
        description="Build the demo's chat datasets, byte-level BPE tokenizer and small Llama target, "
        "deterministically and offline.",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to build into (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="seed for data, tokenizer and weights (default 0)")
    p.add_argument(
        "--train-steps",
        type=int,
        default=None,
        metavar="N",
        help=f"target training steps (default {DEFAULT_STEPS}, about two CPU minutes; {QUICK_STEPS} with --quick)",
    )
    p.add_argument("--quick", action="store_true", help="tiny data and model for tests: seconds, not minutes")
    return p


def _adopt_legacy(out: Path) -> None:
    """A complete build of a version that wrote no marker (assets.json, and nothing but the
    demo's own entries) is still the demo's: mark it so it can be rebuilt in place."""
    names = {"raw", "tokenizer", "target", "assets.json"}
    if not out.is_dir() or output_guard.writer_of(out) is not None or not (out / "assets.json").is_file():
        return
    if all(p.name in names or p.name.startswith((".raw.", ".tokenizer.", ".target.", ".assets.json"))
           for p in out.iterdir()):
        output_guard.mark(out, WRITER)


def _remove_leftovers(out: Path) -> None:
    """Temporary folders of an earlier build that was killed midway."""
    for name in ("raw", "tokenizer", "target"):
        for stale in [*out.glob(f".{name}.tmp-*"), *out.glob(f".{name}.old-*")]:
            if stale.is_dir():
                shutil.rmtree(stale)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(out: Path, seed: int, train_steps: int | None, quick: bool, events: EventWriter) -> dict:
    """Build everything under `out`; returns what assets.json records."""
    import torch

    from pipeline.chat.template import CHAT_TEMPLATE
    from pipeline.chat.synthetic import LONG_SOURCE, generate, write_jsonl
    from pipeline.demo.tiny_target import TargetShape, TrainPlan, build_target, token_stream, train
    from pipeline.demo.tokenizer import build_tokenizer

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    output_guard.refuse_foreign(out, WRITER)
    out.mkdir(parents=True, exist_ok=True)
    output_guard.mark(out, WRITER)
    _remove_leftovers(out)

    def say(text: str) -> None:
        print(f"demo: {text}", flush=True)
        events.message(text)

    say(f"generating chat datasets (seed {seed}{', quick' if quick else ''})")
    datasets = generate(seed, quick)
    with output_guard.staged_folder(out / "raw", None, "writing the demo's chat datasets") as raw_tmp:
        for name, records in datasets.items():
            write_jsonl(raw_tmp / f"{name}.jsonl", records)
    for name, records in datasets.items():
        print(f"demo:   raw/{name}.jsonl  {len(records)} records", flush=True)
    events.artifact(str(out / "raw"), bytes=_dir_bytes(out / "raw"))

    say("training byte-level BPE tokenizer")
    texts = [m["content"] for records in datasets.values() for r in records for m in r["conversations"]]
    tokenizer = build_tokenizer(texts, vocab_size=512 if quick else 1024, chat_template=CHAT_TEMPLATE)
    with output_guard.staged_folder(out / "tokenizer", None, "writing the demo's tokenizer") as tok_tmp:
        tokenizer.save_pretrained(tok_tmp)
    print(f"demo:   tokenizer/  vocab {len(tokenizer)}", flush=True)
    events.artifact(str(out / "tokenizer"), bytes=_dir_bytes(out / "tokenizer"))

    if quick:
        shape = TargetShape(hidden_size=64, intermediate_size=128)
        plan = TrainPlan(steps=QUICK_STEPS if train_steps is None else train_steps, batch_size=4, seq_len=64, warmup=5)
    else:
        shape = TargetShape()
        plan = TrainPlan(steps=DEFAULT_STEPS if train_steps is None else train_steps)
    # The long source teaches long-range counting; the rest carries the short chat patterns.
    conversations = [r["conversations"] for records in datasets.values() for r in records]
    stream = token_stream(tokenizer, conversations, seed)
    model = build_target(shape, tokenizer, seed)
    n_params = sum(p.numel() for p in model.parameters())
    say(
        f"training target: Llama {shape.num_hidden_layers} layers, hidden {shape.hidden_size}, "
        f"{n_params / 1e6:.2f}M params, {plan.steps} steps on {len(stream)} tokens"
    )
    report_every = max(1, plan.steps // 10)

    def on_step(step: int, loss: float, elapsed: float) -> None:
        events.progress(step, plan.steps, unit="steps", loss=round(loss, 4))
        events.metric("loss", round(loss, 5), step=step)
        if step == 1 or step % report_every == 0 or step == plan.steps:
            print(f"demo:   step {step}/{plan.steps}  loss {loss:.4f}  {elapsed:.1f}s", flush=True)

    result = train(model, stream, plan, seed, on_step)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    need = sum(p.numel() * p.element_size() for p in model.parameters()) + (1 << 16)
    with output_guard.staged_folder(out / "target", None, "writing the demo's target model", need) as target_tmp:
        model.save_pretrained(target_tmp)
        tokenizer.save_pretrained(target_tmp)
    events.artifact(str(out / "target"), bytes=_dir_bytes(out / "target"))
    say(f"target trained: loss {result.initial_loss:.3f} -> {result.final_loss:.3f}")
    weights_sha256 = hashlib.sha256((out / "target" / "model.safetensors").read_bytes()).hexdigest()
    kernels = torch.backends.cpu.get_cpu_capability()
    say(f"target weights sha256 {weights_sha256[:16]} (CPU kernels {kernels}): every run on this kind of CPU "
        "builds these bytes, whatever its load or thread count; another CPU kind rounds differently and "
        "trains another target, so compare the demo's acceptance only between runs whose hash agrees")
    _show_sample(model, tokenizer)

    assets = {
        "seed": seed,
        "quick": quick,
        "sources": {
            name: {"path": f"raw/{name}.jsonl", "records": len(records)} for name, records in datasets.items()
        },
        "long_source": LONG_SOURCE,
        "tokenizer": {"path": "tokenizer", "vocab_size": len(tokenizer)},
        "target": {
            "path": "target",
            "architecture": "LlamaForCausalLM",
            "num_hidden_layers": shape.num_hidden_layers,
            "hidden_size": shape.hidden_size,
            "vocab_size": model.config.vocab_size,
            "max_position_embeddings": shape.max_position_embeddings,
            "params": n_params,
            "dtype": "float32",
            "weights_sha256": weights_sha256,
            "cpu_kernels": kernels,
            "train_steps": result.steps,
            "train_tokens": result.tokens_seen,
            "initial_loss": round(result.initial_loss, 5),
            "final_loss": round(result.final_loss, 5),
        },
    }
    write_json_atomic(out / "assets.json", assets)
    events.artifact(str(out / "assets.json"), bytes=(out / "assets.json").stat().st_size)
    return assets


def _show_sample(model, tokenizer) -> None:
    """One greedy answer, so whoever watches the log sees the target learnt the patterns."""
    import torch

    prompt = [{"role": "user", "content": "What is 12 + 30?"}]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    print(f"demo:   sample: {prompt[0]['content']!r} -> {answer.strip()!r}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def body() -> int:
        if args.train_steps is not None and args.train_steps < 1:
            raise BadInput(f"--train-steps must be at least 1, got {args.train_steps}")
        if args.out.exists() and not args.out.is_dir():
            raise BadInput(f"--out {args.out} exists and is not a folder; pass a folder path")
        _adopt_legacy(args.out)
        output_guard.refuse_foreign(args.out, WRITER)
        started = time.monotonic()
        with EventWriter.from_env() as events:
            build(args.out, args.seed, args.train_steps, args.quick, events)
        print(f"demo: done in {time.monotonic() - started:.1f}s -> {args.out}", flush=True)
        return 0

    # a stop unwinds through the folder swap, which removes its temporary
    with on_sigterm():
        return run_program("demo", body)


if __name__ == "__main__":
    sys.exit(main())
