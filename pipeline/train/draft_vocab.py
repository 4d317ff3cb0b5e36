"""Which target tokens the drafter can propose: the draft vocabulary, chosen once per run.

A fresh run counts the answer tokens (those under loss_mask) and keeps the --draft-vocab most
frequent (pipeline/drafter/vocab.py). It counts over the merged dataset when there is one to
count (--vocab-data; an online run's --data; a store's meta `dataset` when it is there
unchanged), the held-out records left out, else over the source's training samples; then it
measures the choice on the held-out slice, so the coverage it reports is an honest estimate.
A resumed run takes the vocabulary its checkpoint's drafter carries, and the note it saved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline.drafter import vocab as dvocab
from pipeline.drafter.model import Eagle3Drafter
from pipeline.train.dist import Dist
from pipeline.train.errors import BadInput
from pipeline.train.source import Source

MAX_RECORDS = 100_000_000
MAX_RECORD_BYTES = 64 << 20  # one merged JSONL line


def choose(source: Source, dist: Dist, vocab_size: int, size: int, vocab_data: str | None,
           train_pos: list[int], val_pos: list[int], log: Callable[[str], None]) -> tuple[dvocab.DraftVocab, dict]:
    """(the vocabulary, its note: where it was chosen, and its coverage of the held-out slice)."""
    counts, where = _counts(source, dist, vocab_size, vocab_data, train_pos, val_pos, log)
    vocab = dvocab.from_counts(counts, size)
    note: dict = {"source": where, "coverage_chosen_on": vocab.coverage, "held_out_coverage": None}
    if val_pos:
        held = dist.all_reduce_sum(source.loss_token_counts(vocab_size, dist.rank, dist.world_size, val_pos)).cpu()
        note["held_out_coverage"] = float(held[vocab.ids].sum()) / max(1, int(held.sum()))
        note["held_out_distinct_tokens"] = int((held > 0).sum())
        note["held_out_distinct_missing"] = int(((held > 0) & ~vocab.t2d).sum())
    return vocab, note


def resumed(drafter: Eagle3Drafter, state: dict) -> tuple[dvocab.DraftVocab, dict | None]:
    """The vocabulary a checkpoint's drafter carries (its d2t/t2d buffers), and the note saved with it."""
    return dvocab.from_buffers(drafter.d2t, drafter.t2d), state.get("vocab_note")


def _counts(source: Source, dist: Dist, vocab_size: int, vocab_data: str | None, train_pos: list[int],
            val_pos: list[int], log: Callable[[str], None]) -> tuple[torch.Tensor, str]:
    """Counts the draft vocabulary is chosen by (summed over the ranks), and where they come from."""
    dataset = source.vocab_dataset(vocab_data, log)
    if dataset is not None:
        skip_ids, skip_lines = source.held_out_keys(val_pos)
        try:
            counts, skipped = (count_dataset_tokens(dataset.path, vocab_size, dataset.sha256, skip_ids, skip_lines)
                               if dist.rank == 0 else (torch.zeros(vocab_size, dtype=torch.int64), 0))
        except BadInput as e:
            if dataset.required:
                raise
            log(f"train: {e}; the draft vocabulary comes from the store's samples instead")
        else:
            return dist.all_reduce_sum(counts), f"{dataset.path} ({skipped} held-out records left out)"
    counts = source.loss_token_counts(vocab_size, dist.rank, dist.world_size, train_pos)
    return dist.all_reduce_sum(counts), f"the store's {len(train_pos)} training samples"


def count_dataset_tokens(path: Path, vocab_size: int, sha256: str | None, skip_ids: set[str],
                         skip_lines: set[int]) -> tuple[torch.Tensor, int]:
    """([vocab] counts of input_ids under loss_mask over the merged JSONL, records skipped),
    leaving out the held-out records (by id where they have one, else by line). The file must
    be the one the store was extracted from (`sha256`, meta's dataset_sha256) when known."""
    path = Path(path)
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    digest = hashlib.sha256()
    skipped = 0
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by `with f` below; only the open's own error is named here)
    except OSError as e:
        raise BadInput(f"--vocab-data {path}: cannot be read ({e.strerror}); pass the merged JSONL the store was "
                       "extracted from, or --vocab-data store") from None
    with f:
        for line_no, line in enumerate(iter(lambda: f.readline(MAX_RECORD_BYTES + 1), b"")):
            digest.update(line)
            if len(line) > MAX_RECORD_BYTES:
                raise BadInput(f"{path}: line {line_no + 1} is longer than {MAX_RECORD_BYTES >> 20} MiB")
            if line_no >= MAX_RECORDS:
                raise BadInput(f"{path}: more than {MAX_RECORDS} records")
            if not line.strip():
                continue
            ids, mask, rid = _record(path, line_no, line)
            if (isinstance(rid, str) and rid in skip_ids) or (not isinstance(rid, str) and line_no in skip_lines):
                skipped += 1
                continue
            sel = _answer_tokens(path, line_no, ids, mask, vocab_size)
            if sel.numel():
                counts += torch.bincount(sel, minlength=vocab_size)
    if sha256 and digest.hexdigest() != sha256:
        raise BadInput(f"--vocab-data {path}: its sha256 is not the dataset_sha256 of the store's meta.json "
                       f"({sha256[:12]}...); pass the merged JSONL the store was extracted from, or --vocab-data store")
    return counts, skipped


def _record(path: Path, line_no: int, line: bytes) -> tuple[object, object, object]:
    """(input_ids, loss_mask, id) of one merged record: BadInput naming the line when it is not one."""
    try:
        rec = json.loads(line)
        return rec["input_ids"], rec["loss_mask"], rec.get("id")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BadInput(f"{path}: line {line_no + 1} is not a merged record (JSON with input_ids and "
                       "loss_mask)") from None


def _answer_tokens(path: Path, line_no: int, ids: object, mask: object, vocab_size: int) -> torch.Tensor:
    """The record's token ids under loss_mask, checked: lists of one length, integers in the vocabulary."""
    if not isinstance(ids, list) or not isinstance(mask, list) or len(ids) != len(mask):
        raise BadInput(f"{path}: line {line_no + 1}: input_ids and loss_mask must be lists of one length")
    try:
        sel = torch.tensor([t for t, m in zip(ids, mask) if m], dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError):
        raise BadInput(f"{path}: line {line_no + 1}: input_ids must be integers") from None
    if sel.numel() and (int(sel.min()) < 0 or int(sel.max()) >= vocab_size):
        raise BadInput(f"{path}: line {line_no + 1}: token ids outside the target's vocabulary of {vocab_size}")
    return sel


def describe(vocab: dvocab.DraftVocab, note: dict, vocab_size: int, held_out: int) -> str:
    """The log line of a fresh run's choice."""
    line = (f"train: draft vocabulary {vocab.size} of {vocab_size} tokens, chosen over {note['source']}: it "
            f"covers {note['coverage_chosen_on']:.1%} of the answer tokens it was chosen on")
    if note.get("held_out_coverage") is not None:
        line += (f" and {note['held_out_coverage']:.1%} of the {held_out} held-out samples' "
                 f"({note['held_out_distinct_missing']} of their {note['held_out_distinct_tokens']} distinct answer "
                 "tokens are missing)")
    else:
        line += " (no held-out slice to measure it on: --val-share 0)"
    return line
