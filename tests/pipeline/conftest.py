"""Fixtures for the extraction tests: a tiny random Llama target and a tiny merged dataset,
built here (not by pipeline.demo / pipeline.merge) so these tests stand alone."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import record_samples
from stage_call import call_stage

from pipeline.records import merge_stats

REPO = Path(__file__).resolve().parents[2]
NUM_LAYERS = 8
HIDDEN = 32
VOCAB = 128
# Options every extraction test uses, so their stores are comparable with the reference.
BASE_OPTS = ["--batch-tokens", "96", "--writers", "2", "--queue", "2", "--device", "cpu", "--window", "16"]


@dataclass(frozen=True)
class TinyData:
    path: Path
    stats: Path
    records: list[dict]


def tiny_tokenizer(order: list[int] | None = None):
    """A word-level tokenizer of VOCAB tokens `t0`..: token `t<i>` has id `order[i]` (default i),
    so a permutation gives a tokenizer of the same size that means other text by the same ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    order = order or list(range(VOCAB))
    tok = Tokenizer(models.WordLevel({f"t{i}": order[i] for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0")


def save_tiny_llama(path: Path, seed: int = 0) -> Path:
    """A random 8-layer Llama of VOCAB tokens, with the tiny tokenizer the tiny data was merged with."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=NUM_LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def write_merged(path: Path, records: list[dict]) -> Path:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def write_stats(path: Path, data: Path, records: list[dict]) -> Path:
    """Merge's stats for `records`, through merge's writer, tied to the dataset at `data` and
    to the tiny tokenizer (save_tiny_llama's)."""
    from pipeline.target.tokenizer import tokenizer_identity

    stats = record_samples.merge_stats(records, hashlib.sha256(data.read_bytes()).hexdigest())
    merge_stats.write_stats(path, replace(stats, tokenizer_identity=tokenizer_identity(tiny_tokenizer())))
    return path


def make_records(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        length = 130 if i == 5 else rng.randint(3, 48)  # one longer than --batch-tokens
        records.append({
            "id": f"tiny-{i}", "source": "tiny",
            "input_ids": [rng.randrange(VOCAB) for _ in range(length)],
            "loss_mask": [int(rng.random() < 0.6) for _ in range(length)],
        })
    return records


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("target") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> TinyData:
    root = tmp_path_factory.mktemp("data")
    records = make_records(36)
    path = write_merged(root / "train.jsonl", records)
    return TinyData(path=path, stats=write_stats(root / "train.stats.json", path, records), records=records)


def cli_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")
    env.update(extra)
    return env


def extract_argv(model: Path, data: Path, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.extract", "--backend", "hf", "--model", str(model), "--data", str(data),
            "--out", str(out), "--reserve", "0", *BASE_OPTS, *more]


@pytest.fixture(scope="session")
def run_extract():
    """Run the real CLI's main in this process (stage_call.py); returns its exit code and output
    as a CompletedProcess gives them. Tests of the process itself (signals, kills) start
    `extract_argv` as a program."""

    def run(model: Path, data: Path, out: Path, *more: str, env: dict | None = None):
        return call_stage("extract", extract_argv(model, data, out, *more)[3:], env=env)

    return run


@pytest.fixture(scope="session")
def reference_store(tmp_path_factory, tiny_target, tiny_data, run_extract) -> Path:
    """An uninterrupted extraction of the tiny dataset (events recorded in events.jsonl beside it)."""
    root = tmp_path_factory.mktemp("reference")
    out = root / "store"
    proc = run_extract(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats),
                       env={"EAGLE3_EVENTS": str(root / "events.jsonl")})
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def fp8_store(tmp_path_factory, tiny_target, tiny_data, run_extract) -> Path:
    """The tiny dataset extracted with --store-dtype fp8 (tests copy it before changing it)."""
    out = tmp_path_factory.mktemp("fp8-store") / "store"
    proc = run_extract(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats), "--store-dtype", "fp8")
    assert proc.returncode == 0, proc.stderr
    return out


def load_store(out: Path) -> dict[str, dict]:
    """Every sample file's tensors, keyed by path relative to the store."""
    from safetensors.torch import load_file

    return {str(p.relative_to(out)): load_file(p) for p in sorted(Path(out).glob("rows_*/*.safetensors"))}


def store_files(out: Path) -> list[str]:
    """Every file under the store except the lock files, relative paths."""
    return sorted(str(p.relative_to(out)) for p in Path(out).rglob("*")
                  if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".lock")))


@pytest.fixture(scope="session")
def evaluation_tiny(tmp_path_factory) -> dict:
    """The evaluate tests' target, prompts and exported drafter, built once (they only read it)."""
    from test_evaluate import build_tiny

    return build_tiny(tmp_path_factory.mktemp("evaluation"))


@pytest.fixture(scope="session")
def xt():
    """The helpers above, for test modules (importing conftest by name is not reliable
    when several test folders have one)."""
    from types import SimpleNamespace

    return SimpleNamespace(load_store=load_store, store_files=store_files, make_records=make_records,
                           tiny_tokenizer=tiny_tokenizer, write_merged=write_merged, write_stats=write_stats, save_tiny_llama=save_tiny_llama,
                           extract_argv=extract_argv, cli_env=cli_env, REPO=REPO, NUM_LAYERS=NUM_LAYERS,
                           HIDDEN=HIDDEN, VOCAB=VOCAB)


@pytest.fixture
def cudnn_sdp():
    """torch's process-wide choice of SDPA kernels, as it was before the test."""
    import torch

    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(was)
