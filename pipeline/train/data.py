"""The hidden-state store as training reads it: checked and memory-mapped (schedule.py plans
its positions into batches, as it plans the online source's).

- `open_store` refuses a store that is incomplete or was built from another target (the
  extractor's `verify_store` decides completeness; meta's shape fields must equal the
  target's config.json), so a drafter never trains on half a dataset or on states of a
  different model.
- `StepDataset` reads one rank's micro-batch per item with `safe_open` (mmap: only the
  rows up to --max-len are touched) inside DataLoader workers, so reading overlaps compute.
  Every sample read is checked for its meaning first (pipeline/store/meaning.py: its header
  is the one the store declares, its rows' values can be states), so a sample changed after
  the store was verified stops the run with exit 2 naming it, never trains on nonsense.

`Store` is one of training's two sources (source.py); draft_vocab.py counts its vocabulary.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.jsonfile import read_json
from pipeline.store.fp8 import as_captured
from pipeline.store.integrity import verify_store
from pipeline.store.manifest import read_manifest
from pipeline.store.meaning import LayoutOf, Meaningless, check_header, rows_problem
from pipeline.target.config import read_config, text_config
from pipeline.target.weights import check_weights
from pipeline.train.errors import BadInput
from pipeline.train.source import Source, StateFiller, VocabDataset

MAX_SAMPLES = 100_000_000
SHAPE_KEYS = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers", "vocab_size": "vocab_size"}


@dataclass(frozen=True)
class Store:
    root: Path
    meta: dict
    files: list[str]  # by position in the store order (manifest index order)
    lengths: list[int]  # stored tokens per sample
    indices: list[int]  # the dataset line each position was extracted from (manifest "index")
    ids: list[str | None]  # the record ids (manifest "id"), where the extractor wrote them
    layout: LayoutOf  # what meta.json declares every sample holds

    @property
    def samples(self) -> int:
        return len(self.files)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    kind = "store"

    def describe(self) -> str:
        return str(self.root)

    def batch(self, positions: list[int], max_len: int) -> dict[str, torch.Tensor]:
        return collate([read_sample(self.root / self.files[p], max_len, self.lengths[p], self.layout,
                                    self.indices[p]) for p in positions])

    def loss_token_counts(self, vocab_size: int, rank: int, world_size: int,
                          positions: list[int]) -> torch.Tensor:
        return count_loss_tokens(self, vocab_size, rank, world_size, positions=positions)

    def identity(self) -> dict:
        """What a checkpoint remembers of the store it was trained on."""
        return {
            "dataset_sha256": self.meta.get("dataset_sha256"),
            "target_fingerprint": self.meta.get("target_fingerprint"),
            "samples": self.samples,
            "tokens": self.tokens,
        }

    def held_out_keys(self, positions: list[int]) -> tuple[set[str], set[int]]:
        """The samples' record ids where the extractor wrote them, and their dataset lines."""
        return {i for p in positions if (i := self.ids[p]) is not None}, {self.indices[p] for p in positions}

    def vocab_dataset(self, vocab_data: str | None, log: Callable[[str], None]) -> VocabDataset | None:
        """--vocab-data (it must be the dataset the store was extracted from: meta's sha256), else
        meta's `dataset` when it is still there; 'store' counts the store's own samples."""
        if vocab_data == "store":
            return None
        sha = self.meta.get("dataset_sha256")
        if vocab_data:
            return VocabDataset(Path(vocab_data), sha, required=True)
        if not self.meta.get("dataset"):
            return None
        path = Path(self.meta["dataset"])
        if path.is_file():
            return VocabDataset(path, sha, required=False)
        log(f"train: the store's dataset {path} is not here; the draft vocabulary comes from the store's samples "
            "(pass --vocab-data MERGED.jsonl to choose it over the whole dataset)")
        return None

    def target_states(self, target: Path, device: torch.device, compile: bool | None, log: Callable[[str], None],
                      stop: threading.Event) -> StateFiller | None:
        """None: the store's samples carry the states extraction computed."""
        return None


def _verify(root: Path, target: Path, meta: dict, checksums: str) -> None:
    """The extractor's own integrity check: manifest complete, sizes, sampled checksums, and
    the target's weight fingerprint against meta's."""
    model = target if meta.get("target_fingerprint") else None
    rep = verify_store(root, model=model, checksums=checksums)
    if not rep.ok:
        more = f" (and {rep.problem_count - 1} more problems)" if rep.problem_count > 1 else ""
        raise BadInput(f"store {root} is not intact: {rep.problems[0]}{more}")


def open_store(root: Path, target: Path, checksums: str = "sample") -> Store:
    root, target = Path(root), Path(target)
    if not root.is_dir():
        raise BadInput(f"--store {root}: not a folder; run the extraction first")
    meta_path = root / "meta.json"
    meta = read_json(meta_path, f"{meta_path}: missing; {root} is not a finished hidden-state store")
    cfg_path = target / "config.json"
    layout = LayoutOf.of_meta(meta, meta_path)
    cfg = text_config(read_config(target, "--target"))
    check_weights(target, "--target")  # a config that lies about its weights is named as such, not as another target
    for mkey, ckey in SHAPE_KEYS.items():
        if meta.get(mkey) != cfg.get(ckey):
            raise BadInput(f"{meta_path}: {mkey} is {meta.get(mkey)!r} but {cfg_path} has {ckey} "
                           f"{cfg.get(ckey)!r}; this store was built from another target")
    _verify(root, target, meta, checksums)
    entries = read_manifest(root)
    if not entries:
        raise BadInput(f"store {root}: the manifest lists no samples")
    if len(entries) > MAX_SAMPLES:
        raise BadInput(f"store {root}: {len(entries)} samples, more than this trainer's bound of {MAX_SAMPLES}")
    order = sorted(entries)
    files, lengths, ids = [], [], []
    for i in order:
        e = entries[i]
        if not isinstance(e.get("file"), str) or not isinstance(e.get("tokens"), int) or e["tokens"] <= 0:
            raise BadInput(f"{root}/manifest.jsonl: the line for sample {i} lacks file or tokens: {e}")
        files.append(e["file"])
        lengths.append(e["tokens"])
        ids.append(e["id"] if isinstance(e.get("id"), str) else None)
    return Store(root=root, meta=meta, files=files, lengths=lengths, indices=list(order), ids=ids, layout=layout)


REDO = "re-extract it (or restore the store) and rerun"


def read_sample(path: Path, max_len: int, tokens: int, layout: LayoutOf,
                sample: int | None = None) -> dict[str, torch.Tensor]:
    """One sample's four tensors, cut to max_len rows; only those rows are read from the file.
    Its header must be the one the store declares for `tokens` tokens and the rows read must
    mean states (pipeline/store/meaning.py), else `Meaningless` (exit 2) names the file, the
    sample and the key. The states of an fp8 store come back dequantized to the dtype they
    were captured in (pipeline/store/fp8.py), so the trainer never knows which store it reads."""
    from safetensors import safe_open

    _header_as_declared(path, tokens, layout, sample)
    with safe_open(str(path), framework="pt") as f:
        raw = {name: f.get_slice(name)[:max_len] for name in layout.tensors(tokens)}
    problem = rows_problem({name: _codes(t) for name, t in raw.items()}, layout)
    if problem:
        raise Meaningless(path, f"{problem}; {REDO}", sample)
    return as_captured(raw, layout.dtype) if layout.fp8 else raw


def _header_as_declared(path: Path, tokens: int, layout: LayoutOf, sample: int | None) -> None:
    try:
        check_header(path, tokens, layout, sample)
    except Meaningless as e:
        raise Meaningless(path, f"{e.what}; {REDO}", sample) from None


def _codes(t: torch.Tensor) -> np.ndarray:
    """A tensor's raw values for pipeline.store.meaning: e4m3 and 16-bit floats as unsigned codes."""
    if t.element_size() == 1 and t.is_floating_point():
        return t.view(torch.uint8).numpy()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().view("uint16")
    return t.numpy()


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Right-padded batch: input_ids, loss_mask (0 on padding), hidden_state, aux_hidden_state, lengths."""
    t = max(s["input_ids"].shape[0] for s in samples)
    b = len(samples)
    first = samples[0]
    ids = torch.zeros(b, t, dtype=torch.int64)
    mask = torch.zeros(b, t, dtype=torch.uint8)
    final = torch.zeros(b, t, first["hidden_state"].shape[1], dtype=first["hidden_state"].dtype)
    aux = torch.zeros(b, t, first["aux_hidden_state"].shape[1], dtype=first["aux_hidden_state"].dtype)
    for j, s in enumerate(samples):
        n = s["input_ids"].shape[0]
        ids[j, :n] = s["input_ids"]
        mask[j, :n] = s["loss_mask"]
        final[j, :n] = s["hidden_state"]
        aux[j, :n] = s["aux_hidden_state"]
    lengths = torch.tensor([s["input_ids"].shape[0] for s in samples], dtype=torch.int64)
    return {"input_ids": ids, "loss_mask": mask, "hidden_state": final, "aux_hidden_state": aux, "lengths": lengths}


class StepDataset(torch.utils.data.Dataset):
    """Item k = this rank's micro-batch of global step `start + k`, from a Store or online Records."""

    def __init__(self, source: Source, schedule: list[tuple[int, int]], plans: dict[int, list[list[list[int]]]],
                 rank: int, max_len: int) -> None:
        self.source = source
        self.schedule = schedule  # global step -> (epoch, step in epoch)
        self.plans = plans
        self.rank = rank
        self.max_len = max_len

    def __len__(self) -> int:
        return len(self.schedule)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        epoch, step = self.schedule[k]
        return self.source.batch(self.plans[epoch][step][self.rank], self.max_len)


def count_loss_tokens(store: Store, vocab_size: int, rank: int, world_size: int, threads: int = 8,
                      positions: list[int] | None = None) -> torch.Tensor:
    """[vocab] counts of input_ids under loss_mask=1 over this rank's share of the samples
    (of `positions`, default every sample)."""
    from concurrent.futures import ThreadPoolExecutor

    from safetensors import safe_open

    def one(p: int) -> torch.Tensor:
        _header_as_declared(store.root / store.files[p], store.lengths[p], store.layout, store.indices[p])
        with safe_open(str(store.root / store.files[p]), framework="pt") as f:
            ids = f.get_tensor("input_ids")
            mask = f.get_tensor("loss_mask").bool()
        sel = ids[mask]
        if sel.numel() and (int(sel.min()) < 0 or int(sel.max()) >= vocab_size):
            raise BadInput(f"{store.root / store.files[p]}: token ids outside the target's vocabulary of {vocab_size}")
        return torch.bincount(sel, minlength=vocab_size)

    counts = torch.zeros(vocab_size, dtype=torch.int64)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        chosen = range(store.samples) if positions is None else positions
        for c in pool.map(one, chosen[rank::world_size]):
            counts += c
    return counts
