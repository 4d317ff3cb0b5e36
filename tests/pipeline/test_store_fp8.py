"""`--store-dtype fp8`: the states as e4m3 with per-token scales, about half the bytes of bf16,
read back by training and --verify with no other change, and refused when mixed or tampered."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from stage_call import call_stage

from pipeline.records.extract_estimate import ExtractEstimate, parse_estimate
from pipeline.records.train_summary import read_summary
from pipeline.store.fp8 import dequantize, quantize
from pipeline.store.meaning import LayoutOf
from pipeline.train.data import read_sample

WIDE = 128  # hidden size of this file's target: the 16 bytes of scales a token weigh as at real sizes
E4M3_HALF_ULP = 2.0 ** -4  # relative rounding error of a normal e4m3 value
E4M3_MIN_NORMAL = 2.0 ** -6  # smallest normal e4m3 value (of 448 at the row's amax)


def _bound_holds(x: torch.Tensor, back: torch.Tensor, scale: torch.Tensor, columns: int) -> None:
    """Every element within e4m3's rounding of its own value (normals) or half a subnormal step."""
    t = x.shape[0]
    xs, bs = x.float().reshape(t, columns, -1), back.float().reshape(t, columns, -1)
    s = scale.reshape(t, columns, 1).float()
    normal = xs.abs() >= s * E4M3_MIN_NORMAL
    err = (xs - bs).abs()
    slack = 2.0 ** -6 * xs.abs()  # bf16 arithmetic on the way back: the scale and the product rounded
    assert bool((err <= E4M3_HALF_ULP * xs.abs() + slack + 1e-12)[normal].all())
    assert bool((err <= s * 2.0 ** -10 + slack + 1e-12)[~normal].all())


def _row_error(x: torch.Tensor, back: torch.Tensor) -> torch.Tensor:
    return (x.float() - back.float()).norm(dim=-1) / x.float().norm(dim=-1)


def test_round_trip_error_is_bounded_on_random_and_heavy_tailed_activations():
    g = torch.Generator().manual_seed(0)
    h = 256
    normal = torch.randn(512, 3 * h, generator=g)
    # Heavy tails as real residual streams have them: Student-t values, a few "massive" channels,
    # and three capture layers an order of magnitude apart.
    t_dist = torch.distributions.StudentT(torch.tensor(2.0)).sample((512, 3 * h))
    t_dist[:, [5, h + 17, 2 * h + 40]] *= 300.0
    layered = t_dist * torch.tensor([1.0] * h + [10.0] * h + [100.0] * h)
    for x in (normal.to(torch.bfloat16), layered.to(torch.bfloat16)):
        for columns in (1, 3):
            q, scale = quantize(x, columns)
            assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
            assert scale.shape == ((512,) if columns == 1 else (512, 3))
            back = dequantize(q, scale, torch.bfloat16)
            assert back.dtype == torch.bfloat16 and back.shape == x.shape
            _bound_holds(x, back, scale, columns)
        q, scale = quantize(x, 3)
        back = dequantize(q, scale, torch.bfloat16)
        for layer in range(3):
            part = slice(layer * h, (layer + 1) * h)
            assert float(_row_error(x[:, part], back[:, part]).max()) < 0.04

    # One scale per token would let the deepest layer set it: the shallow layer's error grows.
    x = layered.to(torch.bfloat16)
    per_token = dequantize(*quantize(x, 1), torch.bfloat16)
    per_layer = dequantize(*quantize(x, 3), torch.bfloat16)
    assert float(_row_error(x[:, :h], per_layer[:, :h]).mean()) < float(_row_error(x[:, :h], per_token[:, :h]).mean())

    zeros = torch.zeros(4, 3 * h, dtype=torch.bfloat16)
    q, scale = quantize(zeros, 3)
    assert bool((scale == 0).all()) and bool((dequantize(q, scale, torch.bfloat16) == 0).all())


# ---- a store extracted from a tiny target -----------------------------------------------------------

@pytest.fixture(scope="module")
def wide_target(tmp_path_factory, xt) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=xt.VOCAB, hidden_size=WIDE, intermediate_size=256, num_hidden_layers=xt.NUM_LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    path = tmp_path_factory.mktemp("wide") / "target"
    LlamaForCausalLM(cfg).save_pretrained(path)
    xt.tiny_tokenizer().save_pretrained(path)  # the one the tiny data was merged with (extract checks it)
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory, wide_target, tiny_data, run_extract) -> dict[str, Path]:
    """The same samples as stored by a CPU run (fp32, as captured) and with --store-dtype fp8."""
    root = tmp_path_factory.mktemp("stores")
    out = {}
    for name, more in (("captured", []), ("fp8", ["--store-dtype", "fp8"])):
        proc = run_extract(wide_target, tiny_data.path, root / name, "--stats", str(tiny_data.stats), *more)
        assert proc.returncode == 0, proc.stderr
        out[name] = root / name
    return out


def _disk_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.glob("rows_*/*.safetensors"))


def _bf16_copy(src: Path, dst: Path, hidden: int) -> None:
    """The same samples written by the store's own writer in bf16, as a CUDA extraction writes them."""
    from safetensors.torch import load_file

    from pipeline.store.manifest import read_manifest
    from pipeline.store.sample_file import Sample, write_sample

    for index, e in read_manifest(src).items():
        t = load_file(src / e["file"])
        write_sample(dst, Sample(index=index, id=e["id"], input_ids=t["input_ids"], loss_mask=t["loss_mask"],
                                 hidden_state=t["hidden_state"].to(torch.bfloat16).contiguous(),
                                 aux_hidden_state=t["aux_hidden_state"].to(torch.bfloat16).contiguous()), hidden)


def _verify(xt, out: Path, *more: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "pipeline.extract", "--verify", "--out", str(out), *more]
    return subprocess.run(argv, cwd=xt.REPO, env=xt.cli_env(), capture_output=True, text=True, timeout=120)


def test_an_fp8_store_is_verified_and_holds_at_most_55_percent_of_the_bf16_bytes(stores, wide_target, tmp_path, xt):
    fp8 = stores["fp8"]
    meta = json.loads((fp8 / "meta.json").read_text())
    assert meta["store_dtype"] == "float8_e4m3fn" and meta["dtype"] == "float32"
    assert meta["scaling"]["hidden_state"] == "per-token" and meta["scaling"]["aux_hidden_state"] == "per-token-per-layer"
    proc = _verify(xt, fp8, "--model", str(wide_target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "intact" in proc.stdout

    _bf16_copy(stores["captured"], tmp_path / "bf16", WIDE)
    ratio = _disk_bytes(fp8) / _disk_bytes(tmp_path / "bf16")
    assert ratio <= 0.55, ratio


def test_the_engine_quantizing_on_the_device_writes_the_files_write_sample_makes(stores, tmp_path):
    """One fp8 format: the extraction's batches quantized where they were computed give, sample
    for sample, the bytes the store's writer makes of the same captured states."""
    from safetensors.torch import load_file

    from pipeline.store.manifest import read_manifest
    from pipeline.store.sample_file import Sample, write_sample

    captured, fp8 = read_manifest(stores["captured"]), read_manifest(stores["fp8"])
    for index, e in captured.items():
        t = load_file(stores["captured"] / e["file"])
        entry = write_sample(tmp_path, Sample(index=index, id=e["id"], input_ids=t["input_ids"],
                                              loss_mask=t["loss_mask"], hidden_state=t["hidden_state"],
                                              aux_hidden_state=t["aux_hidden_state"]), WIDE, fp8=True)
        assert (tmp_path / entry["file"]).read_bytes() == (stores["fp8"] / fp8[index]["file"]).read_bytes(), index
        assert entry == fp8[index]


def test_training_reads_fp8_and_bf16_stores_as_the_states_captured(stores, reference_store):
    from safetensors.torch import load_file

    from pipeline.store.manifest import read_manifest

    captured, fp8 = read_manifest(stores["captured"]), read_manifest(stores["fp8"])
    assert sorted(captured) == sorted(fp8)
    layouts = {name: LayoutOf.of_meta(json.loads((stores[name] / "meta.json").read_text())) for name in stores}
    for index in sorted(captured):
        want = read_sample(stores["captured"] / captured[index]["file"], 16, captured[index]["tokens"],
                           layouts["captured"])
        got = read_sample(stores["fp8"] / fp8[index]["file"], 16, fp8[index]["tokens"], layouts["fp8"])
        for name in ("input_ids", "loss_mask"):
            assert torch.equal(got[name], want[name])
        for name in ("hidden_state", "aux_hidden_state"):
            assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype == torch.float32
            assert float(_row_error(want[name], got[name]).max()) < 0.04, (index, name)
    # A store without store_dtype (every store before fp8) reads exactly as written.
    old = read_manifest(reference_store)
    meta = json.loads((reference_store / "meta.json").read_text())
    assert "store_dtype" not in meta and "scaling" not in meta
    for e in old.values():
        raw = load_file(reference_store / e["file"])
        got = read_sample(reference_store / e["file"], 10, e["tokens"], LayoutOf.of_meta(meta))
        assert all(torch.equal(got[k], raw[k][:10]) for k in got)


def test_pipeline_train_trains_on_an_fp8_store(stores, wide_target, tmp_path):
    argv = ["--store", stores["fp8"], "--target", wide_target, "--out", tmp_path / "run", "--steps", "3",
            "--batch-tokens", "256", "--max-len", "256", "--log-every", "1", "--workers", "1", "--ttt-length", "2"]
    proc = call_stage("train", argv)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = read_summary(tmp_path / "run" / "summary.json")
    assert summary.steps == 3 and summary.loss == summary.loss  # finite, not NaN


def test_a_flipped_scale_in_an_fp8_sample_fails_verification(stores, tmp_path, xt):
    import shutil

    out = tmp_path / "store"
    shutil.copytree(stores["fp8"], out)
    entry = json.loads((out / "manifest.jsonl").read_text().splitlines()[4])
    path = out / entry["file"]
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    head = json.loads(data[8:8 + n])
    begin = 8 + n + head["aux_hidden_state_scale"]["data_offsets"][0]
    data[begin + 3] ^= 0x80  # the sign of the first token's first layer scale
    path.write_bytes(bytes(data))

    proc = _verify(xt, out)
    assert proc.returncode == 2
    assert str(path) in proc.stdout and "xxh3" in proc.stdout


def test_resuming_a_store_with_the_other_store_dtype_is_refused(stores, wide_target, tiny_data, run_extract, tmp_path):
    import shutil

    out = tmp_path / "store"
    shutil.copytree(stores["captured"], out)
    proc = run_extract(wide_target, tiny_data.path, out, "--store-dtype", "fp8")
    assert proc.returncode == 2
    assert "meta.json" in proc.stderr and "--store-dtype" in proc.stderr and "float32" in proc.stderr


def test_estimate_of_an_fp8_store_bounds_it_and_counts_a_byte_a_value(stores, wide_target, tiny_data, xt):
    def estimate(*more: str) -> ExtractEstimate:
        proc = subprocess.run([sys.executable, "-m", "pipeline.extract", "--estimate", "--model", str(wide_target),
                               "--stats", str(tiny_data.stats), "--json", *more], cwd=xt.REPO, env=xt.cli_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return parse_estimate(proc.stdout, "pipeline.extract --estimate --json")

    fp8, bf16 = estimate("--store-dtype", "fp8"), estimate()
    tokens = sum(len(r["input_ids"]) for r in tiny_data.records)
    assert fp8.store_dtype == "float8_e4m3fn" and fp8.hidden_state_bytes == tokens * 4 * WIDE
    assert fp8.scale_bytes == tokens * 16 and fp8.per_token_bytes == 4 * WIDE + 16 + 9
    assert fp8.per_token_bytes <= 0.55 * bf16.per_token_bytes
    actual = sum(p.stat().st_size for p in stores["fp8"].rglob("*") if p.is_file())
    assert actual <= fp8.bytes <= actual + len(tiny_data.records) * (4096 + 1024) + 8192
