"""The H200 recipe trains online (`--data`, no store): its train phase's pre-flight asks
`pipeline.train --estimate --json` for the memory of the very run it starts, and compares it with
each GPU's free memory; there is no store space to check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.core.checks.context import CheckContext
from console.core.checks.registry import run_checks
from console.core.config.loader import load_config
from console.core.telemetry.samples import GpuReading, GpuSample
from pipeline.sizes import format_bytes
from pipeline.train.options import build_parser as train_parser

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "examples" / "smollm2-h200.yaml"
GB = 10**9
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
           "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "vocab_size": 49152, "tie_word_embeddings": True, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
           "rope_theta": 100000, "torch_dtype": "bfloat16"}


def _gpu_check(cfg):
    train = cfg.phase("train")
    [spec] = [c for c in train.checks if c.kind == "gpu_free_memory"]
    return train, spec


def test_the_train_preflight_estimates_the_run_the_phase_starts_and_checks_no_store_space():
    cfg = load_config(CONFIG)
    train, spec = _gpu_check(cfg)
    run = train_parser().parse_args(list(train.argv[3:]))
    est_argv = spec.arg["values"]["estimate"]["command"]
    assert est_argv[:4] == ["python", "-m", "pipeline.train", "--estimate"] and "--json" in est_argv
    est = train_parser().parse_args(est_argv[3:])
    assert run.data is not None and run.store is None  # online
    for field in ("data", "target", "batch_tokens", "batch_size", "max_len", "ttt_length", "draft_vocab"):
        assert getattr(est, field) == getattr(run, field), field
    assert spec.arg["need"] == "estimate.gpu_bytes"
    assert not [c for c in train.checks if c.kind in ("free_space", "store_intact")]


@pytest.mark.parametrize("free_gb,status", [(140, "pass"), (20, "fail")])
def test_the_train_preflight_compares_the_estimate_with_the_gpus_free_memory(tmp_path, free_gb, status):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(SMOLLM2))  # no weights: counted from the config
    cfg = load_config(CONFIG, {"data": str(tmp_path)})
    train, spec = _gpu_check(cfg)
    h200 = GpuSample(index=0, name="NVIDIA H200", uuid="GPU-0", utilization=0.0,
                     memory_used=(141 - free_gb) * GB, memory_total=141 * GB, temperature=30.0, power=80.0,
                     power_limit=700.0)
    ctx = CheckContext(cfg, train, gpu_reader=lambda: GpuReading(t=0.0, gpus=(h200,), driver="560.35"))
    [r] = run_checks([spec], ctx)
    assert r.status == status, r.message
    need = r.evidence["need_bytes"]
    assert 15 * GB < need < 40 * GB  # the target, the drafter and a 16k-token batch of SmolLM2-135M
    assert r.evidence["values"] == {"estimate.gpu_bytes": need}
    if status == "fail":
        assert r.message == f"need {format_bytes(need)} per GPU: GPU 0 has 20.0 GB free"
