"""Synthetic chat datasets for the demo: patterned, so a small target learns them and a
drafter has structure to predict.

Each source is a list of records in the chat-dataset shape that merge reads,
`{"id", "conversations": [{"role", "content"}]}`. Everything flows from one
`random.Random`, so a seed fixes every byte. Most `longform` answers run to hundreds of
numbers: longer than merge's default --max-len, so a production-like drop is visible; a
fifth are short enough to keep, so the source still contributes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WORDS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "orange", "peach", "pear", "plum", "berry", "red", "blue", "green", "yellow", "purple", "white", "black", "silver", "golden", "brown", "cat", "dog", "horse", "tiger", "eagle", "whale", "shark", "mouse", "rabbit", "fox", "wolf", "bear", "paris", "london", "tokyo", "cairo", "lima", "oslo", "rome", "madrid", "berlin", "sydney", "river", "mountain", "forest", "desert", "ocean", "valley", "island", "meadow", "canyon", "glacier", "table", "chair", "window", "door", "lamp", "clock", "mirror", "pillow", "basket", "bottle"]

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a careful assistant. Answer briefly.",
    "Answer exactly and without extra words.",
)

UNITS = (
    ("km", "meters", 1000),
    ("meters", "centimeters", 100),
    ("kg", "grams", 1000),
    ("hours", "minutes", 60),
    ("minutes", "seconds", 60),
    ("days", "hours", 24),
    ("feet", "inches", 12),
    ("liters", "milliliters", 1000),
    ("weeks", "days", 7),
)


def _msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _with_system(rng: random.Random, turns: list[dict[str, str]]) -> list[dict[str, str]]:
    if rng.random() < 0.3:
        return [_msg("system", rng.choice(SYSTEM_PROMPTS)), *turns]
    return turns


def _arith_turn(rng: random.Random, a: int) -> tuple[str, str, int]:
    b = rng.randint(1, 99)
    op = rng.choice(("+", "-", "*"))
    c = a + b if op == "+" else a - b if op == "-" else a * b
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    q = rng.choice((f"What is {a} {op} {b}?", f"Compute {a} {word} {b}.", f"Calculate {a} {op} {b}."))
    return q, f"{a} {op} {b} = {c}.", c


def arithmetic(rng: random.Random) -> list[dict[str, str]]:
    a = rng.randint(1, 99)
    q, ans, c = _arith_turn(rng, a)
    turns = [_msg("user", q), _msg("assistant", ans)]
    if rng.random() < 0.4:
        b = rng.randint(1, 99)
        op = rng.choice(("+", "-"))
        d = c + b if op == "+" else c - b
        turns += [
            _msg("user", f"Now {'add' if op == '+' else 'subtract'} {b}."),
            _msg("assistant", f"{c} {op} {b} = {d}."),
        ]
    return _with_system(rng, turns)


def units(rng: random.Random) -> list[dict[str, str]]:
    big, small, factor = rng.choice(UNITS)
    n = rng.randint(1, 60)
    if rng.random() < 0.6:
        q = rng.choice((f"Convert {n} {big} to {small}.", f"How many {small} are in {n} {big}?"))
        ans = f"{n} {big} is {n * factor} {small}."
    else:
        q = rng.choice((f"Convert {n * factor} {small} to {big}.", f"How many {big} is {n * factor} {small}?"))
        ans = f"{n * factor} {small} is {n} {big}."
    return _with_system(rng, [_msg("user", q), _msg("assistant", ans)])


def wordplay(rng: random.Random) -> list[dict[str, str]]:
    words = rng.sample(WORDS, rng.randint(3, 7))
    listed = " ".join(words)
    task = rng.randrange(6)
    if task == 0:
        q, ans = f"Reverse the words: {listed}", " ".join(reversed(words))
    elif task == 1:
        q, ans = f"Sort alphabetically: {listed}", " ".join(sorted(words))
    elif task == 2:
        q, ans = f"Repeat after me: {listed}", listed
    elif task == 3:
        w = words[0]
        q, ans = f"Spell the word {w}.", "-".join(w)
    elif task == 4:
        q, ans = f"Count the words: {listed}", f"There are {len(words)} words."
    else:
        q, ans = f"What is the last item of: {listed}?", f"The last item is {words[-1]}."
    return _with_system(rng, [_msg("user", q), _msg("assistant", ans)])


SHORT_LONGFORM = 0.2
"""Share of `longform` answers short enough for --max-len 512: the source then shows both a
production-like drop and a contribution, at little extra extraction time."""


def longform(rng: random.Random) -> list[dict[str, str]]:
    kind = rng.randrange(3)
    short = rng.random() < SHORT_LONGFORM
    if kind == 0:
        a = rng.randint(1, 400)
        b = a + (rng.randint(40, 110) if short else rng.randint(230, 400))
        q, ans = f"Count from {a} to {b}.", ", ".join(str(i) for i in range(a, b + 1)) + "."
    elif kind == 1:
        n = rng.randint(2, 19)
        k = rng.randint(20, 45) if short else rng.randint(90, 150)
        q = f"Write the {n} times table up to {n} x {k}."
        ans = "\n".join(f"{n} x {i} = {n * i}" for i in range(1, k + 1))
    else:
        words = [rng.choice(WORDS) for _ in range(rng.randint(30, 70) if short else rng.randint(120, 220))]
        q = "Number each of these words: " + " ".join(words)
        ans = "\n".join(f"{i}. {w}" for i, w in enumerate(words, 1))
    return _with_system(rng, [_msg("user", q), _msg("assistant", ans)])


@dataclass(frozen=True)
class SourceSpec:
    name: str
    make: Callable[[random.Random], list[dict[str, str]]]
    records: int
    quick_records: int


SOURCES = (
    SourceSpec("arithmetic", arithmetic, 1500, 60),
    SourceSpec("units", units, 1000, 40),
    SourceSpec("wordplay", wordplay, 1200, 50),
    SourceSpec("longform", longform, 200, 12),
)
LONG_SOURCE = "longform"


def generate(seed: int, quick: bool = False) -> dict[str, list[dict]]:
    """Every source's records; a source's stream depends only on the seed and its name."""
    out: dict[str, list[dict]] = {}
    for spec in SOURCES:
        rng = random.Random(f"{seed}:{spec.name}")
        n = spec.quick_records if quick else spec.records
        out[spec.name] = [
            {"id": f"{spec.name}-{i:05d}", "conversations": spec.make(rng)} for i in range(n)
        ]
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records)
