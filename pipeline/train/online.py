"""Online training's data: the merged dataset read by offset, and the target that turns each
batch's tokens into the states a store would hold, on the rank's own device.

Nothing reaches the disk: the store's 4.6 KB a token (a 135M target; 50 KB for an 8B one)
is what limited how many samples a drafter saw. A batch costs one target forward instead,
under no_grad, with the same capture hooks extraction uses (pipeline.capture), in the dtype
extraction would store (bf16 on CUDA, fp32 on CPU), so online and offline feed the same
step the same numbers. The plan, validation slice and resume rules are the offline ones:
positions here are records of the dataset, as positions there are samples of the store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline.capture import Capturer, StoppedInForward
from pipeline.events import warn
from pipeline.merged_dataset import DatasetIndex, Record, RecordReader, index_dataset
from pipeline.records import merge_stats
from pipeline.target.config import capture_layers, read_config, text_config
from pipeline.target.model import load_target
from pipeline.target.tokenizer import check_merged_with
from pipeline.target.weights import check_weights, target_fingerprint
from pipeline.train.errors import BadInput, TrainError
from pipeline.train.loss import StepAborted
from pipeline.train.source import StateFiller, VocabDataset


class Records:
    """The merged dataset as the trainer's source (source.py: the protocol a Store answers too)."""

    kind = "online"

    def __init__(self, index: DatasetIndex, fingerprint: str) -> None:
        self.index = index
        self.fingerprint = fingerprint
        self.lengths = list(index.lengths)
        self._reader: RecordReader | None = None
        self._pid = 0

    @property
    def samples(self) -> int:
        return len(self.lengths)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    def describe(self) -> str:
        return f"{self.index.path} (online: the target computes the states)"

    def identity(self) -> dict:
        return {"source": "online", "dataset_sha256": self.index.sha256, "target_fingerprint": self.fingerprint,
                "samples": self.samples, "tokens": self.tokens}

    def _read(self, p: int) -> Record:
        if self._reader is None or self._pid != os.getpid():  # a loader worker opens its own handle
            self._reader, self._pid = self.index.open(), os.getpid()
        return self._reader.read(p)

    def batch(self, positions: list[int], max_len: int) -> dict[str, torch.Tensor]:
        """Right-padded input_ids, loss_mask and lengths; the states come from `TargetStates`.
        The file must still be the one indexed at the start (merged_dataset: its pin, and each
        line's crc32), else BadInput naming it: a read window never trusts stale offsets."""
        self.index.check_unchanged()
        rows = [self._read(p) for p in positions]
        t = min(max(len(r.input_ids) for r in rows), max_len)
        ids = torch.zeros(len(rows), t, dtype=torch.int64)
        mask = torch.zeros(len(rows), t, dtype=torch.uint8)
        for j, r in enumerate(rows):
            n = min(len(r.input_ids), max_len)
            ids[j, :n] = torch.tensor(r.input_ids[:n])
            mask[j, :n] = torch.tensor(r.loss_mask[:n], dtype=torch.uint8)
        lengths = torch.tensor([min(len(r.input_ids), max_len) for r in rows], dtype=torch.int64)
        return {"input_ids": ids, "loss_mask": mask, "lengths": lengths}

    def loss_token_counts(self, vocab_size: int, rank: int, world_size: int,
                          positions: list[int]) -> torch.Tensor:
        counts = torch.zeros(vocab_size, dtype=torch.int64)
        for p in positions[rank::world_size]:
            r = self._read(p)
            sel = torch.tensor([t for t, m in zip(r.input_ids, r.loss_mask) if m], dtype=torch.int64)
            if sel.numel():
                counts += torch.bincount(sel, minlength=vocab_size)
        return counts

    def held_out_keys(self, positions: list[int]) -> tuple[set[str], set[int]]:
        """The records' ids (every merged record has one)."""
        return {self._read(p).id for p in positions}, set()

    def vocab_dataset(self, vocab_data: str | None, log: Callable[[str], None]) -> VocabDataset:
        """--vocab-data, else --data itself (held to the sha256 it was indexed with)."""
        path = Path(vocab_data or self.index.path)
        return VocabDataset(path, self.index.sha256 if path == Path(self.index.path) else None, required=True)

    def target_states(self, target: Path, device: torch.device, compile: bool | None, log: Callable[[str], None],
                      stop: threading.Event) -> StateFiller:
        """The records hold tokens only: the target runs beside the drafter to compute their states."""
        return TargetStates(target, device, compile, log, stop)


def open_records(data: Path, target: Path, stats: str | None, log: Callable[[str], None]) -> Records:
    """Index and validate every record (file:line on the first bad one) against the target's
    vocabulary, and check that the data was tokenized by the target's tokenizer."""
    cfg = text_config(read_config(target, "--target"))
    vocab = cfg.get("vocab_size")
    index = index_dataset(Path(data), vocab_size=vocab if isinstance(vocab, int) else None)
    check_weights(target, "--target")  # before the target loads: its config must describe its weights
    check_tokenizer(index, Path(target), stats, log)
    return Records(index, target_fingerprint(target))


def check_tokenizer(index: DatasetIndex, target: Path, stats: str | None, log: Callable[[str], None]) -> None:
    """The tokenizer merge recorded for the data (its stats: beside it, or --stats) must be the
    target's, by vocabulary and merges (pipeline/target/tokenizer.py): the same ids mean other
    text under another tokenizer, and a drafter trained on them learns noise without a word."""
    if stats == "none":
        warn("train", f"--stats none: the tokenizer {index.path} was merged with is not checked against {target}'s",
             log=log)
        return
    path = Path(stats) if stats else merge_stats.beside(index.path)
    recorded = merge_stats.read_stats(path, f"{path}: missing; online training reads merge's stats of --data to "
                                            "prove it was tokenized by the target's tokenizer: pass them with --stats "
                                            "(or --stats none to train without that check)")
    if recorded.dataset_sha256 != index.sha256:
        raise BadInput(f"{path}: dataset_sha256 {recorded.dataset_sha256[:12]}... but {index.path} hashes to "
                       f"{index.sha256[:12]}...: these stats describe another dataset; pass the merge's own --stats")
    check_merged_with(recorded, path, index.path, target, "--target", "pass --stats none")


class TargetStates:
    """The target on the training device, answering a batch with the states a store would hold."""

    def __init__(self, target: Path, device: torch.device, compile: bool | None, log: Callable[[str], None],
                 stop: threading.Event | None) -> None:
        cfg = text_config(read_config(target, "--target"))
        layers = int(cfg["num_hidden_layers"])
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        model = load_target(Path(target), str(device), self.dtype, "--target")
        for p in model.parameters():
            p.requires_grad_(False)
        self.capturer = Capturer(model, capture_layers(layers), layers, str(device), compile=compile, log=log,
                                 stop=stop, stage="train")
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def fill(self, batch: dict[str, torch.Tensor], lengths: list[int]) -> None:
        """Adds hidden_state and aux_hidden_state (and a per-row `nonfinite` flag) to a device batch."""
        try:
            final, aux, bad = self.capturer.forward(batch["input_ids"], lengths)
        except StoppedInForward:
            raise StepAborted from None
        except torch.cuda.OutOfMemoryError:
            raise TrainError(f"out of GPU memory in the target's forward on a batch of {tuple(batch['input_ids'].shape)} "
                             "tokens; lower --batch-tokens") from None
        batch["hidden_state"], batch["aux_hidden_state"], batch["nonfinite"] = final, aux, bad

    def close(self) -> None:
        self.capturer.close()
