"""The store's own write bound: write_sample (checksum, temp + fsync + rename) on N threads
from memory. bench/extract.py and bench/extract_sglang.py both compare their end-to-end rate
with this one measure."""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from pipeline.store.sample_file import Sample, write_sample


def store_write(folder: Path, files: int, writers: int, seq: int, hidden: int, vocab: int,
                pin: bool = False) -> float:
    """GB/s of `files` samples of `seq` tokens written into a fresh store under `folder`."""
    block = torch.empty(seq, 4 * hidden, dtype=torch.bfloat16).normal_()
    if pin:
        block = block.pin_memory()
    ids = torch.randint(0, vocab, (seq,), dtype=torch.int64)
    mask = torch.ones(seq, dtype=torch.uint8)
    store = folder / "write-test"
    store.mkdir()

    def one(i: int) -> int:
        s = Sample(index=i, id=str(i), input_ids=ids, loss_mask=mask,
                   hidden_state=block.view(-1)[: seq * hidden].view(seq, hidden),
                   aux_hidden_state=block.view(-1)[seq * hidden:].view(seq, 3 * hidden))
        return write_sample(store, s, hidden)["bytes"]

    t = time.perf_counter()
    with ThreadPoolExecutor(writers) as pool:
        total = sum(pool.map(one, range(files)))
    gbps = total / (time.perf_counter() - t) / 1e9
    shutil.rmtree(store)
    return gbps
