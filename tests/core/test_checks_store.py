"""store_intact: the console asks `python -m pipeline.extract --verify --json` whether a
hidden-state store is whole, and turns the answer into a result with evidence. The store
and the target here are written by hand (no torch): the verifier reads only sizes,
checksums, the manifest, meta.json and the target's safetensors headers."""

from __future__ import annotations

import json
import os
import struct

from core_harness import ctx_for

from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec
from pipeline.checksum import file_checksum
from pipeline.store.layout import header, sample_bytes
from pipeline.target.weights import target_fingerprint

SAMPLES = 5
HIDDEN = 8


def _safetensors(path, payload: bytes) -> None:
    head = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + payload)


def _target(root):
    target = root / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    _safetensors(target / "model.safetensors", bytes(range(256)) * 64)
    return target


def _store(root, target):
    """A finished store of SAMPLES samples, as pipeline.extract leaves it: each sample the
    tensors meta.json declares (all zeros: states that mean something, for the verifier)."""
    out = root / "store"
    (out / "rows_0").mkdir(parents=True)
    lines = []
    for i in range(SAMPLES):
        path = out / f"rows_0/{i}.safetensors"
        head = header(10 + i, HIDDEN, "bfloat16")
        path.write_bytes(head + bytes(sample_bytes(10 + i, HIDDEN, "bfloat16") - len(head)))
        lines.append({"index": i, "id": f"s{i}", "tokens": 10 + i, "bytes": path.stat().st_size,
                      "file": f"rows_0/{i}.safetensors", "xxh3": file_checksum(path)})
    (out / "manifest.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    meta = {"format": "eagle3-hidden-store/2", "records": SAMPLES, "limit": None, "hidden_size": HIDDEN,
            "dtype": "bfloat16", "target_fingerprint": target_fingerprint(target)}
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def check(arg, root):
    assert validate("store_intact", arg) is None
    spec = CheckSpec(kind="store_intact", arg=arg, name=default_name("store_intact", arg))
    return run_checks([spec], ctx_for(root), timeout=60)[0]


def test_an_intact_store_of_the_same_target_passes_with_its_figures(tmp_path):
    target = _target(tmp_path)
    _store(tmp_path, target)
    r = check({"path": "store", "model": "target", "sample": 2}, tmp_path)
    assert r.status == "pass", r.message
    assert "intact" in r.message and "5/5 samples" in r.message and "target weights match" in r.message
    assert r.evidence["samples"] == SAMPLES and r.evidence["sizes_checked"] == SAMPLES
    assert 2 <= r.evidence["checksums_checked"] <= 4
    assert r.evidence["target_fingerprint"] == r.evidence["model_fingerprint"]


def test_a_truncated_sample_fails_naming_the_file_and_both_sizes(tmp_path):
    out = _store(tmp_path, _target(tmp_path))
    victim = out / "rows_0/3.safetensors"
    size = victim.stat().st_size
    os.truncate(victim, 500)
    r = check("store", tmp_path)  # scalar form: the path; default sample
    assert r.status == "fail"
    assert str(victim) in r.message and "500 bytes" in r.message and str(size) in r.message
    assert r.evidence["problem_count"] == 1 and r.evidence["exit_code"] == 2


def test_a_sample_whose_bytes_changed_fails_on_its_checksum_when_all_are_checked(tmp_path):
    out = _store(tmp_path, _target(tmp_path))
    victim = out / "rows_0/1.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    r = check({"path": "store", "sample": 0}, tmp_path)
    assert r.status == "fail"
    assert "xxh3" in r.message and str(victim) in r.message
    assert r.evidence["checksums_checked"] == SAMPLES


def test_target_weights_changed_in_place_fail_on_the_fingerprint(tmp_path):
    target = _target(tmp_path)
    _store(tmp_path, target)
    _safetensors(target / "model.safetensors", bytes(reversed(range(256))) * 64)  # same shape, other weights
    r = check({"path": "store", "model": "target"}, tmp_path)
    assert r.status == "fail"
    assert "target_fingerprint" in r.message
    assert r.evidence["target_fingerprint"] != r.evidence["model_fingerprint"]


def test_an_incomplete_manifest_fails(tmp_path):
    out = _store(tmp_path, _target(tmp_path))
    lines = (out / "manifest.jsonl").read_text().splitlines(keepends=True)
    (out / "manifest.jsonl").write_text("".join(lines[:-1]))
    r = check({"path": "store"}, tmp_path)
    assert r.status == "fail"
    assert "1 of 5 samples missing (indices 4)" in r.message


def test_no_store_fails_with_the_verifiers_line(tmp_path):
    r = check({"path": "nowhere"}, tmp_path)
    assert r.status == "fail"
    assert "no store at" in r.message and "nowhere" in r.message


def test_arguments_are_checked_when_the_config_loads():
    assert "unknown key 'modle'" in validate("store_intact", {"path": "s", "modle": "t"})
    assert "'path' is missing" in validate("store_intact", {"model": "t"})
    assert "sample" in validate("store_intact", {"path": "s", "sample": -1})
    assert default_name("store_intact", {"path": "/data/store"}) == "store_intact:/data/store"
