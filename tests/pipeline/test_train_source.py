"""Training's two sources answer its questions alike: a store extracted from the tiny merged
dataset, and that dataset read online, each opened as the trainer opens it and asked only
through the Source protocol (pipeline/train/source.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from pipeline.train import draft_vocab
from pipeline.train.dist import Dist
from pipeline.train.options import Options
from pipeline.train.setup import open_source
from pipeline.train.source import Source

VOCAB = 128  # the tiny target's


def _open(kind: str, reference_store: Path, tiny_data, tiny_target: Path, tmp_path: Path) -> Source:
    where = {"store": reference_store} if kind == "store" else {"data": tiny_data.path, "stats": str(tiny_data.stats)}
    opts = Options(target=tiny_target, out=tmp_path / "run", **where)
    return open_source(opts, Dist(0, 1, 0, torch.device("cpu")), lambda _s: None)


def _answer_counts(records: list[dict], keep) -> torch.Tensor:
    counts = torch.zeros(VOCAB, dtype=torch.int64)
    for i, r in enumerate(records):
        if keep(i):
            for t, m in zip(r["input_ids"], r["loss_mask"]):
                counts[t] += m
    return counts


@pytest.mark.parametrize("kind", ["store", "online"])
def test_a_source_answers_for_the_records_it_was_made_from(kind, reference_store, tiny_data, tiny_target, tmp_path):
    records = tiny_data.records
    source = _open(kind, reference_store, tiny_data, tiny_target, tmp_path)
    assert source.kind == kind
    assert source.samples == len(records) and source.lengths == [len(r["input_ids"]) for r in records]
    assert source.identity()["samples"] == len(records)
    assert str(tiny_data.path if kind == "online" else reference_store) in source.describe()

    batch = source.batch([2, 7], max_len=20)
    for row, p in enumerate([2, 7]):
        n = min(len(records[p]["input_ids"]), 20)
        assert batch["input_ids"][row, :n].tolist() == records[p]["input_ids"][:n]
        assert batch["loss_mask"][row, :n].tolist() == records[p]["loss_mask"][:n]
    assert batch["lengths"].tolist() == [min(len(records[p]["input_ids"]), 20) for p in (2, 7)]

    held = [1, 4, 9]
    ids, _lines = source.held_out_keys(held)
    assert ids == {records[p]["id"] for p in held}
    evens = list(range(0, len(records), 2))
    assert torch.equal(source.loss_token_counts(VOCAB, 0, 2, evens),
                       _answer_counts(records, lambda i: i % 4 == 0))  # rank 0 of 2: every other position

    dataset = source.vocab_dataset(None, lambda _s: None)
    assert dataset is not None and Path(dataset.path) == Path(tiny_data.path)


@pytest.mark.parametrize("kind", ["store", "online"])
def test_the_draft_vocabulary_is_chosen_over_the_dataset_without_the_held_out_records(kind, reference_store, tiny_data,
                                                                                     tiny_target, tmp_path):
    records = tiny_data.records
    source = _open(kind, reference_store, tiny_data, tiny_target, tmp_path)
    held = [0, 3, 5]
    train = [p for p in range(len(records)) if p not in held]
    vocab, note = draft_vocab.choose(source, Dist(0, 1, 0, torch.device("cpu")), VOCAB, 40, None, train, held,
                                     lambda _s: None)
    counts = _answer_counts(records, lambda i: i not in held)
    want = torch.sort(torch.sort(-counts, stable=True).indices[:40]).values
    assert torch.equal(vocab.ids, want)
    assert note["source"] == f"{tiny_data.path} (3 held-out records left out)"
    held_counts = _answer_counts(records, lambda i: i in held)
    assert note["held_out_coverage"] == pytest.approx(float(held_counts[want].sum()) / int(held_counts.sum()))


@pytest.mark.parametrize("kind", ["store", "online"])
def test_a_batch_gets_the_states_the_target_computes_whichever_source_it_comes_from(kind, reference_store, tiny_data,
                                                                                  tiny_target, tmp_path):
    """The store's batches carry the states extraction wrote; the online source's carry tokens and
    the target it starts fills them: either way the drafter sees the same states, and setup never
    asks which source it holds."""
    store = _open("store", reference_store, tiny_data, tiny_target, tmp_path)
    source = _open(kind, reference_store, tiny_data, tiny_target, tmp_path)
    batch = source.batch([2, 7], max_len=20)
    states = source.target_states(tiny_target, torch.device("cpu"), False, lambda _s: None, threading.Event())
    assert (states is None) == (kind == "store")
    if states is not None:
        assert "hidden_state" not in batch
        states.fill(batch, batch["lengths"].tolist())
        states.close()
    want = store.batch([2, 7], max_len=20)
    for row, n in enumerate(batch["lengths"].tolist()):
        for key in ("hidden_state", "aux_hidden_state"):
            assert torch.allclose(batch[key][row, :n].float(), want[key][row, :n].float(), atol=1e-4), key
