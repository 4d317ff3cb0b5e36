"""The demo's build, one part after the other: the chat datasets, a byte-level BPE tokenizer
trained on them, and a small Llama target trained on their token stream, each built under a
temporary name and exchanged into place, then assets.json, whose presence means a complete
build. Same seed, same CPU kind: same bytes (torch's deterministic ops, one thread)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from pipeline import output_guard
from pipeline.atomic_io import write_json_atomic
from pipeline.chat.synthetic import LONG_SOURCE, generate, write_jsonl
from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.folder import WRITER, dir_bytes, remove_leftovers
from pipeline.demo.options import DEFAULT_STEPS, QUICK_STEPS
from pipeline.demo.tiny_target import TargetShape, TrainPlan, TrainResult, build_target, token_stream, train
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.events import EventWriter

Say = Callable[[str], None]


def _write_datasets(out: Path, seed: int, quick: bool, say: Say, events: EventWriter) -> dict[str, list[dict]]:
    say(f"generating chat datasets (seed {seed}{', quick' if quick else ''})")
    datasets = generate(seed, quick)
    with output_guard.staged_folder(out / "raw", None, "writing the demo's chat datasets") as raw_tmp:
        for name, records in datasets.items():
            write_jsonl(raw_tmp / f"{name}.jsonl", records)
    for name, records in datasets.items():
        print(f"demo:   raw/{name}.jsonl  {len(records)} records", flush=True)
    events.artifact(str(out / "raw"), bytes=dir_bytes(out / "raw"))
    return datasets


def _write_tokenizer(out: Path, datasets: dict[str, list[dict]], quick: bool, say: Say,
                     events: EventWriter) -> PreTrainedTokenizerFast:
    say("training byte-level BPE tokenizer")
    texts = [m["content"] for records in datasets.values() for r in records for m in r["conversations"]]
    tokenizer = build_tokenizer(texts, vocab_size=512 if quick else 1024, chat_template=CHAT_TEMPLATE)
    with output_guard.staged_folder(out / "tokenizer", None, "writing the demo's tokenizer") as tok_tmp:
        tokenizer.save_pretrained(tok_tmp)
    print(f"demo:   tokenizer/  vocab {len(tokenizer)}", flush=True)
    events.artifact(str(out / "tokenizer"), bytes=dir_bytes(out / "tokenizer"))
    return tokenizer


def _shape_and_plan(train_steps: int | None, quick: bool) -> tuple[TargetShape, TrainPlan]:
    if quick:
        steps = QUICK_STEPS if train_steps is None else train_steps
        return TargetShape(hidden_size=64, intermediate_size=128), TrainPlan(steps=steps, batch_size=4, seq_len=64,
                                                                              warmup=5)
    return TargetShape(), TrainPlan(steps=DEFAULT_STEPS if train_steps is None else train_steps)


def _train_target(model: LlamaForCausalLM, stream: torch.Tensor, plan: TrainPlan, seed: int,
                  events: EventWriter) -> TrainResult:
    report_every = max(1, plan.steps // 10)

    def on_step(step: int, loss: float, elapsed: float) -> None:
        events.progress(step, plan.steps, unit="steps", loss=round(loss, 4))
        events.metric("loss", round(loss, 5), step=step)
        if step == 1 or step % report_every == 0 or step == plan.steps:
            print(f"demo:   step {step}/{plan.steps}  loss {loss:.4f}  {elapsed:.1f}s", flush=True)

    return train(model, stream, plan, seed, on_step)


def _write_target(out: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, events: EventWriter) -> None:
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    need = sum(p.numel() * p.element_size() for p in model.parameters()) + (1 << 16)
    with output_guard.staged_folder(out / "target", None, "writing the demo's target model", need) as target_tmp:
        model.save_pretrained(target_tmp)
        tokenizer.save_pretrained(target_tmp)
    events.artifact(str(out / "target"), bytes=dir_bytes(out / "target"))


def _target_entry(model: LlamaForCausalLM, shape: TargetShape, result: TrainResult, weights_sha256: str,
                  kernels: str, params: int) -> dict:
    """assets.json's account of the target: its shape, its bytes' hash and how it was trained."""
    return {
        "path": "target",
        "architecture": "LlamaForCausalLM",
        "num_hidden_layers": shape.num_hidden_layers,
        "hidden_size": shape.hidden_size,
        "vocab_size": model.config.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "params": params,
        "dtype": "float32",
        "weights_sha256": weights_sha256,
        "cpu_kernels": kernels,
        "train_steps": result.steps,
        "train_tokens": result.tokens_seen,
        "initial_loss": round(result.initial_loss, 5),
        "final_loss": round(result.final_loss, 5),
    }


def build(out: Path, seed: int, train_steps: int | None, quick: bool, events: EventWriter) -> dict:
    """Build everything under `out`; returns what assets.json records."""
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    output_guard.refuse_foreign(out, WRITER)
    out.mkdir(parents=True, exist_ok=True)
    output_guard.mark(out, WRITER)
    remove_leftovers(out)

    def say(text: str) -> None:
        print(f"demo: {text}", flush=True)
        events.message(text)

    datasets = _write_datasets(out, seed, quick, say, events)
    tokenizer = _write_tokenizer(out, datasets, quick, say, events)
    shape, plan = _shape_and_plan(train_steps, quick)
    # The long source teaches long-range counting; the rest carries the short chat patterns.
    conversations = [r["conversations"] for records in datasets.values() for r in records]
    stream = token_stream(tokenizer, conversations, seed)
    model = build_target(shape, tokenizer, seed)
    n_params = sum(p.numel() for p in model.parameters())
    say(
        f"training target: Llama {shape.num_hidden_layers} layers, hidden {shape.hidden_size}, "
        f"{n_params / 1e6:.2f}M params, {plan.steps} steps on {len(stream)} tokens"
    )
    result = _train_target(model, stream, plan, seed, events)
    _write_target(out, model, tokenizer, events)
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
        "target": _target_entry(model, shape, result, weights_sha256, kernels, n_params),
    }
    write_json_atomic(out / "assets.json", assets)
    events.artifact(str(out / "assets.json"), bytes=(out / "assets.json").stat().st_size)
    return assets


def _show_sample(model: Any, tokenizer: Any) -> None:
    """One greedy answer, so whoever watches the log sees the target learnt the patterns."""
    prompt = [{"role": "user", "content": "What is 12 + 30?"}]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    print(f"demo:   sample: {prompt[0]['content']!r} -> {answer.strip()!r}", flush=True)
