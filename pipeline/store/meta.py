"""`meta.json`: what a store was built from, so a resume can refuse to mix two targets.

A resume that silently appended hidden states of another target or dataset would give a
drafter training data that disagrees with itself; the identity fields below must match
exactly, and the first differing one is named in the refusal. The target is identified by
`target_fingerprint` (pipeline/target/weights.py: its weights' safetensors headers and
sampled blocks), so new weights saved at the same path are refused and the same weights at
a new path are accepted. `target` (the path), `world_size`, `limit` and the dataset's path
are informational: a store may be resumed with another number of GPUs, a larger --limit, or
with the same dataset or target moved. `records` and `limit` say how many samples a
finished store holds (integrity.expected_samples).

An fp8 store (pipeline/store/fp8.py) adds `store_dtype` ("float8_e4m3fn") and `scaling`
(layout.SCALING) to its meta.json; `dtype` stays the dtype the states were captured in. A
store without these keys holds its states in `dtype` as captured, as every store did before
fp8, so older stores read as they always have. Both keys are part of the identity: a
resume never mixes fp8 and bf16 samples in one store.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.atomic_io import write_json_atomic
from pipeline.program_edge import BadInput
from pipeline.store.layout import FP8, META, SCALING
from pipeline.target.config import TargetError, capture_layers, read_config, text_config
from pipeline.target.weights import check_weights, target_fingerprint

FORMAT = "eagle3-hidden-store/2"
"""/2: manifest lines carry an xxh3 checksum and meta.json a target_fingerprint."""
IDENTITY = ("format", "target_fingerprint", "num_layers", "hidden_size", "capture_layers", "dtype",
            "store_dtype", "scaling", "dataset_sha256", "max_len")


@dataclass(frozen=True)
class TargetInfo:
    """The target as config.json describes it; read with json so no weights are loaded."""

    path: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    fingerprint: str = ""  # target_fingerprint() of its weights

    @classmethod
    def from_dir(cls, model_dir: Path) -> TargetInfo:
        cfg = read_config(model_dir, "--model")
        info = cls.from_config(cfg, os.path.abspath(model_dir), Path(model_dir) / "config.json")
        check_weights(model_dir, "--model")  # a config that lies about the weights: refused before they load
        try:
            fingerprint = target_fingerprint(model_dir)
        except TargetError as e:
            raise BadInput(f"{e} (--model)") from None
        return dataclasses.replace(info, fingerprint=fingerprint)

    @property
    def capture_layers(self) -> list[int]:
        """pipeline.target.capture_layers of this target; TargetError (BadInput) when it is too shallow."""
        return capture_layers(self.num_layers)

    @classmethod
    def from_config(cls, cfg: dict, path: str, where: object = "config") -> TargetInfo:
        text = text_config(cfg)
        values = {}
        for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
            v = text.get(key)
            if not isinstance(v, int) or v <= 0:
                raise BadInput(f"{where}: key {key!r} must be a positive integer, got {v!r}")
            values[key] = v
        return cls(
            path=path,
            model_type=str(cfg.get("model_type", "")),
            num_layers=values["num_hidden_layers"],
            hidden_size=values["hidden_size"],
            vocab_size=values["vocab_size"],
        )


def build_meta(target: TargetInfo, dtype: str, dataset: Path, dataset_sha256: str,
               records: int, max_len: int | None, world_size: int, limit: int | None = None,
               fp8: bool = False) -> dict:
    meta = {
        "format": FORMAT,
        "target": target.path,
        "target_fingerprint": target.fingerprint,
        "model_type": target.model_type,
        "num_layers": target.num_layers,
        "hidden_size": target.hidden_size,
        "vocab_size": target.vocab_size,
        "capture_layers": target.capture_layers,
        "dtype": dtype,
        "dataset": os.path.abspath(dataset),
        "dataset_sha256": dataset_sha256,
        "records": records,
        "limit": limit,
        "max_len": max_len,
        "world_size": world_size,
    }
    if fp8:
        meta.update(store_dtype=FP8, scaling=dict(SCALING))
    return meta


def store_dtype(meta: dict) -> str:
    """What a store's sample files hold: "float8_e4m3fn", or its capture dtype (a store
    written before fp8 stores, or without --store-dtype fp8, has no store_dtype key)."""
    return meta.get("store_dtype") or str(meta.get("dtype"))


def read_meta(out: Path) -> dict | None:
    path = Path(out) / META
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise BadInput(f"{path}: not valid JSON ({e}); move the store aside or delete meta.json to start over") from None


def ensure_meta(out: Path, meta: dict, rank: int) -> None:
    """Write meta.json for a new store, or refuse a resume whose identity differs."""
    out = Path(out)
    old = read_meta(out)
    if old is None:
        write_json_atomic(out / META, meta, tag=f".rank{rank}")
        return
    for key in IDENTITY:
        if old.get(key) != meta.get(key):
            if key == "format":
                raise BadInput(
                    f"{out / META}: format {old.get(key)!r}, this extractor writes {meta.get(key)!r} (manifest lines "
                    "with checksums, a target fingerprint); it cannot resume that store: pass a new --out"
                )
            if key == "target_fingerprint":
                raise BadInput(
                    f"{out / META}: target_fingerprint is {old.get(key)!r} in the store but the target "
                    f"{meta.get('target')} has {meta.get(key)!r}: its weights differ from those the store was "
                    f"written with (changed in place, or another model); a store must not mix two targets: "
                    "restore those weights, or pass a new --out"
                )
            if key == "store_dtype":
                raise BadInput(
                    f"{out / META}: the store holds {store_dtype(old)} states but this run writes "
                    f"{store_dtype(meta)} (--store-dtype); one store never mixes the two: rerun with the "
                    "--store-dtype it was started with, or pass a new --out"
                )
            raise BadInput(
                f"{out / META}: field {key!r} is {old.get(key)!r} in the store but {meta.get(key)!r} for this run; "
                "resume only with the same target, dataset, dtype and --max-len, or pass a new --out"
            )
    if rank == 0 and old != meta:
        write_json_atomic(out / META, meta, tag=f".rank{rank}")
