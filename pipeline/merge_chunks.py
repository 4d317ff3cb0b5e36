"""Merge's unit of parallel work: one chunk of lines of one source, tokenized and masked.

Lives apart from the CLI so worker processes import only this (and the tokenizer), and so
pickled references never point at `__main__`. A worker writes its kept records to a part
file and returns only their byte positions and counts: the parent shuffles positions, not
token lists, so a merge far larger than memory still fits.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline.chat_records import RecordError, parse_record
from pipeline.loss_mask import encode

EXAMPLES_KEPT = 3


@dataclass(frozen=True)
class Chunk:
    index: int
    source: str
    path: str
    start: int
    end: int
    first_line: int
    samples: int


@dataclass
class SourceCounts:
    read: int = 0
    records: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    dropped_too_long: int = 0
    dropped_empty_mask: int = 0
    truncated: int = 0

    def add(self, other: "SourceCounts") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class ChunkResult:
    index: int
    part: str
    entries: list[tuple[int, int]] = field(default_factory=list)
    counts: SourceCounts = field(default_factory=SourceCounts)
    empty_examples: list[str] = field(default_factory=list)
    error: RecordError | None = None


@dataclass(frozen=True)
class EncodeSettings:
    tokenizer: str
    method: str
    max_len: int
    on_long: str
    parts_dir: str


_worker: tuple[Any, EncodeSettings] | None = None


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def init_worker(settings: EncodeSettings, tokenizer: Any = None) -> None:
    """Pool initializer: one tokenizer per process, loaded once."""
    global _worker
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _worker = (tokenizer if tokenizer is not None else load_tokenizer(settings.tokenizer), settings)


def encode_chunk(chunk: Chunk) -> ChunkResult:
    assert _worker is not None, "init_worker must run first"
    tokenizer, s = _worker
    part = str(Path(s.parts_dir) / f"{chunk.index:07d}.jsonl")
    result = ChunkResult(chunk.index, part)
    counts = result.counts
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        data = f.read(chunk.end - chunk.start)
    offset = 0
    with open(part, "wb") as out:
        for k, raw in enumerate(data.split(b"\n")):
            if not raw.strip():
                continue
            line = chunk.first_line + k
            counts.read += 1
            try:
                rec = parse_record(raw, chunk.path, line)
            except RecordError as exc:
                result.error = exc
                return result
            try:
                enc = encode(tokenizer, rec.conversations, s.method)
            except Exception as exc:
                result.error = RecordError(chunk.path, line, "conversations", f"the chat template failed on it: {exc}")
                return result
            ids, mask = enc.input_ids, enc.loss_mask
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
