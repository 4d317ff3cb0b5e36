"""Merge's unit of parallel work: one chunk of records of one source, tokenized and masked.

Lives apart from the CLI so worker processes import only this (and the tokenizer), and so
pickled references never point at `__main__`. The parent reads the sources (through
`pipeline.chat.sources`, which skips and counts unusable records) and hands each worker a
bounded chunk of records; the worker writes the ones it keeps to a part file and returns only
their byte positions and counts: the parent shuffles positions, not token lists, so a merge
far larger than memory still fits.

Two bounds keep one huge record from costing minutes and gigabytes (a 50 MB record once
took 124 s and 20 GB in the tokenizer): a line longer than `max_line_bytes` is skipped
unread by the reader; a record with more text than `--max-len` tokens could ever hold (more
than `max_len` x the longest token's characters x a margin) is dropped, or cut to that
many characters before tokenizing when truncating, which keeps the same first tokens.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline.chat.loss_mask import encode, special_token_ids
from pipeline.chat.records import ChatRecord, RecordError
from pipeline.program_edge import leave_stops_to_parent

EXAMPLES_KEPT = 3
CHAR_MARGIN = 2
"""Slack on the characters bound for normalizers that fold several characters into one."""
MIN_LINE_BYTES = 16 * 2**20
LINE_BYTES_PER_CHAR = 8
"""JSON spends up to 6 bytes on one character (\\uXXXX), plus keys and punctuation."""


@dataclass(frozen=True)
class Chunk:
    index: int
    source: str
    path: str
    records: tuple[ChatRecord, ...]


@dataclass
class SourceCounts:
    read: int = 0
    records: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    dropped_too_long: int = 0
    dropped_empty_mask: int = 0
    truncated: int = 0
    over_char_bound: int = 0
    lines_too_long: int = 0

    def add(self, other: SourceCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class ChunkResult:
    index: int
    part: str
    source: str = ""
    entries: list[tuple[int, int]] = field(default_factory=list)
    counts: SourceCounts = field(default_factory=SourceCounts)
    empty_examples: list[str] = field(default_factory=list)
    oversize_examples: list[str] = field(default_factory=list)
    shapes: dict[str, int] = field(default_factory=dict)
    error: RecordError | None = None


@dataclass(frozen=True)
class EncodeSettings:
    tokenizer: str
    method: str
    max_len: int
    on_long: str
    parts_dir: str
    max_chars: int


_worker: tuple[Any, EncodeSettings] | None = None


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def max_token_chars(tokenizer: Any) -> int:
    """The most characters one token can stand for: its vocab string's length (byte-level
    BPE spells a byte as one character, so this bounds characters too). Special tokens
    are left out: text that spells one is tokenized as text."""
    special = special_token_ids(tokenizer)
    longest = max((len(t) for t, i in tokenizer.get_vocab().items() if i not in special), default=1)
    return max(longest, 1)


def char_bound(tokenizer: Any, max_len: int) -> int:
    """Characters of content beyond which a record surely has more than `max_len` tokens."""
    return max_len * max_token_chars(tokenizer) * CHAR_MARGIN


def line_bound(max_chars: int) -> int:
    return max(MIN_LINE_BYTES, max_chars * LINE_BYTES_PER_CHAR)


def content_chars(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages)


def cut_conversation(messages: list[dict[str, str]], max_chars: int) -> list[dict[str, str]]:
    """The conversation's first `max_chars` characters of content, messages after the cut left out."""
    kept: list[dict[str, str]] = []
    left = max_chars
    for msg in messages:
        if left <= 0:
            break
        kept.append(msg if len(msg["content"]) <= left else {**msg, "content": msg["content"][:left]})
        left -= len(msg["content"])
    return kept


def init_worker(settings: EncodeSettings, tokenizer: Any = None, pool_worker: bool = False) -> None:
    """Pool initializer: one tokenizer per process, loaded once. SIGTERM kills a pool
    worker outright and Ctrl-C leaves it be: the parent is the one that cleans up."""
    global _worker
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if pool_worker:
        leave_stops_to_parent()
    _worker = (tokenizer if tokenizer is not None else load_tokenizer(settings.tokenizer), settings)


def encode_chunk(chunk: Chunk) -> ChunkResult:
    assert _worker is not None, "init_worker must run first"
    tokenizer, s = _worker
    part = str(Path(s.parts_dir) / f"{chunk.index:07d}.jsonl")
    result = ChunkResult(chunk.index, part, chunk.source)
    counts = result.counts
    with open(part, "wb") as out:
        offset = 0
        for rec in chunk.records:
            counts.read += 1
            line = rec.line
            result.shapes[rec.shape] = result.shapes.get(rec.shape, 0) + 1
            conversation = rec.conversations
            if content_chars(conversation) > s.max_chars:
                counts.over_char_bound += 1
                if len(result.oversize_examples) < EXAMPLES_KEPT:
                    result.oversize_examples.append(f"{rec.id} ({chunk.path}:{line})")
                if s.on_long == "drop":
                    counts.dropped_too_long += 1
                    continue
                conversation = cut_conversation(conversation, s.max_chars)
            try:
                enc = encode(tokenizer, conversation, s.method)
            except Exception as exc:  # noqa: BLE001 - a template error on this record, reported with its line
                result.error = RecordError(
                    chunk.path, line, "conversations", f"the chat template failed on it: {exc}{_template_hint(exc)}",
                    record_id=rec.id,
                )
                return result
            ids, mask = enc.input_ids, enc.loss_mask
            if not any(mask) and conversation is not rec.conversations:
                counts.dropped_too_long += 1  # the answers lay past the cut, so past --max-len
                continue
            if not any(mask):
                counts.dropped_empty_mask += 1
                if len(result.empty_examples) < EXAMPLES_KEPT:
                    result.empty_examples.append(f"{rec.id} ({chunk.path}:{line})")
                continue
            if len(ids) > s.max_len:
                if s.on_long == "drop":
                    counts.dropped_too_long += 1
                    continue
                ids, mask = ids[: s.max_len], mask[: s.max_len]
                if not any(mask):
                    counts.dropped_too_long += 1
                    continue
                counts.truncated += 1
            blob = (
                json.dumps(
                    {"id": rec.id, "source": chunk.source, "input_ids": ids, "loss_mask": mask},
                    separators=(",", ":"),
                    ensure_ascii=False,
                )
                + "\n"
            ).encode("utf-8")
            out.write(blob)
            result.entries.append((offset, len(blob)))
            offset += len(blob)
            counts.records += 1
            counts.tokens += len(ids)
            counts.loss_tokens += sum(mask)
    return result


def _template_hint(exc: Exception) -> str:
    text = str(exc).lower()
    if "alternate" in text or "assistant" in text:
        return (" (templates that insist on user/assistant alternation refuse records that open with the "
                "assistant: try --on-assistant-first drop)")
    return ""
