"""ShareGPT split by a hash of the record id, and cleaned into our chat shape.

The split happens before any stage sees a record: a record's side is sha256(seed:id), so a
held-out prompt can never reach regeneration, merge or training, and the same id lands on the
same side in every run. Records are cleaned here into one shape (ShareGPT's extra assistant
names, leading assistant turns, empty turns, repeated roles joined), so every stage reads one
shape whatever its own reader accepts. Both sides are then put in a seeded order that does not
depend on the file's: records sorted by id, then shuffled.

These are the choices of the measured run's split (bench/recipe.py at 4057b8a,
bench/results/recipe-h200.txt): the same seed gives the same records on each side, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from pipeline.chat.json_stream import ArrayReader, first_char, read_lines
from pipeline.chat.records import (
    EMPTY_VALUE,
    NO_ASSISTANT,
    NO_MESSAGES,
    NOT_JSON,
    NOT_UTF8,
    SHAREGPT_ROLES,
    UNKNOWN_ROLE,
)
from pipeline.chat.sources import DEFAULT_ROLE_MAP, DUPLICATE_ID, JOINER, LINE_TOO_LONG

ROLES = {**SHAREGPT_ROLES, **DEFAULT_ROLE_MAP}
HELDOUT_PROMPT_TOO_LONG = "heldout_prompt_too_long"
PROGRESS_EVERY = 2000  # records between two progress reports


def clean(obj: object, max_user_turns: int) -> tuple[list[dict] | None, str]:
    """Our {role, content} turns of a ShareGPT record, cut after `max_user_turns` answered
    user turns, and why not (a reason of pipeline.chat.records) when it has none to learn from."""
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        return None, NO_MESSAGES
    turns: list[dict] = []
    for m in obj["conversations"]:
        if not isinstance(m, dict):
            return None, NO_MESSAGES
        role = ROLES.get(str(m.get("from", m.get("role"))).lower())
        text = m.get("value", m.get("content"))
        if role is None:
            return None, UNKNOWN_ROLE
        if not isinstance(text, str) or not text.strip():
            return None, EMPTY_VALUE
        if not text.isascii() and not _utf8(text):
            return None, NOT_UTF8
        if not turns and role == "assistant":
            continue  # an answer to nothing
        if turns and turns[-1]["role"] == role:
            turns[-1] = {"role": role, "content": turns[-1]["content"] + JOINER + text}
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
        return None, NO_ASSISTANT
    return keep, "ok"


def _utf8(text: str) -> bool:
    """False for a lone surrogate (JSON's "\\ud800"): valid JSON, but no UTF-8 file can hold it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def side(record_id: str, seed: int, heldout_share: float) -> str:
    h = int.from_bytes(hashlib.sha256(f"{seed}:{record_id}".encode()).digest()[:8], "big")
    return "heldout" if h / 2**64 < heldout_share else "train"


@dataclass(frozen=True)
class SplitChoices:
    seed: int
    heldout_share: float
    train_limit: int | None
    heldout_limit: int
    max_user_turns: int
    max_prompt_chars: int


@dataclass
class Split:
    train: list[dict] = field(default_factory=list)
    heldout: list[dict] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    read: int = 0
    cut_at: int | None = None
    """Where the array ends inside a record (ShareGPT's wheel copy is cut), as a byte offset."""

    def describe(self) -> str:
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items()) if k != "ok") or "none"
        cut = f"; the array is cut at byte {self.cut_at}: the record there is left out" if self.cut_at else ""
        return (f"{self.read} records read; train {len(self.train)}, held-out prompts {len(self.heldout)}; "
                f"skipped: {skipped}{cut}")


def elements(stream: BinaryIO, name: str, max_record_bytes: int, split: Split) -> Iterator[tuple[object, int]]:
    """(record, bytes read so far) of a JSON array, read one element at a time, or of JSON lines.
    A line that is not JSON or is past the bound is counted, not fatal; the array's cut is noted."""
    if first_char(stream) == "[":
        reader = ArrayReader(stream, name, max_record_bytes)
        for el in reader:
            yield el.value, reader.bytes_read
        split.cut_at = reader.cut_at
        return
    done = 0
    for raw, size in read_lines(stream, None, max_record_bytes):
        done += size
        if raw is None:
            split.reasons[LINE_TOO_LONG] += 1
        elif raw.strip():
            try:
                yield json.loads(raw), done
            except ValueError:
                split.reasons[NOT_JSON] += 1


def split_sharegpt(records: Iterable[tuple[object, int]], choices: SplitChoices, split: Split,
                   progress: Callable[[int, int], None] = lambda n, b: None) -> Split:
    """Train records and held-out prompts, each in a seeded order independent of the file's.
    An id seen before is skipped (counted) once a record of it was kept: ShareGPT V3 repeats an
    id after an empty record, and the second is whole."""
    c = choices
    pools: dict[str, list[tuple[str, dict]]] = {"train": [], "heldout": []}
    seen: set[str] = set()
    for obj, done in records:
        split.read += 1
        if split.read % PROGRESS_EVERY == 0:
            progress(split.read, done)
        rid = str(obj.get("id")) if isinstance(obj, dict) and obj.get("id") is not None else f"sharegpt:{split.read}"
        where = side(rid, c.seed, c.heldout_share)
        if rid in seen:
            split.reasons[DUPLICATE_ID] += 1
            continue
        turns, why = clean(obj, 1 if where == "heldout" else c.max_user_turns)
        split.reasons[why] += 1
        if turns is None:
            continue
        seen.add(rid)
        if where == "heldout":
            prompt = [t for t in turns if t["role"] != "assistant"][:2]
            if sum(len(t["content"]) for t in prompt) > c.max_prompt_chars:
                split.reasons[HELDOUT_PROMPT_TOO_LONG] += 1
                continue
        pools[where].append((rid, {"id": rid, "conversations": turns}))
    rng = random.Random(c.seed)
    for name, limit in (("train", c.train_limit), ("heldout", c.heldout_limit)):
        pool = sorted(pools[name], key=lambda p: p[0])
        rng.shuffle(pool)
        getattr(split, name).extend(r for _, r in pool[:limit])
    return split
