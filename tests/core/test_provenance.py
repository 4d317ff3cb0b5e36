from __future__ import annotations

import json
import os
from pathlib import Path

from console.core.model.config import Config, Phase
from console.core.records import provenance
from console.core.records.provenance import changed_paths, fingerprint, read_record, record_phase


def test_file_fingerprint_is_a_full_hash_for_small_files(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    fp = fingerprint(p)
    assert fp["type"] == "file" and fp["size"] == 3
    assert fp["sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert "partial" not in fp


def test_large_files_hash_head_and_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "FULL_HASH_LIMIT", 1000)
    monkeypatch.setattr(provenance, "PARTIAL_CHUNK", 100)
    p = tmp_path / "big.bin"
    p.write_bytes(b"a" * 5000)
    fp = fingerprint(p)
    assert fp["partial"] is True
    data = bytearray(p.read_bytes())
    data[2500] = ord("b")  # a change in the middle: invisible to the hash...
    p.write_bytes(bytes(data))
    os.utime(p, ns=(fp["mtime_ns"] + 10**9, fp["mtime_ns"] + 10**9))
    new = fingerprint(p)
    assert new["sha256"] == fp["sha256"]
    assert "large file" in provenance.compare(fp, new)  # ...but the new mtime is reported
    data[0] = ord("c")
    p.write_bytes(bytes(data))
    assert fingerprint(p)["sha256"] != fp["sha256"]


def test_directory_fingerprint(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "a").write_bytes(b"12")
    (d / "sub" / "b").write_bytes(b"345")
    fp = fingerprint(d)
    assert (fp["type"], fp["files"], fp["size"]) == ("dir", 2, 5)
    assert fingerprint(d) == fp
    (d / "sub" / "b").write_bytes(b"999")
    os.utime(d / "sub" / "b", ns=(1, 1))
    changed = fingerprint(d)
    assert changed["tree_sha256"] != fp["tree_sha256"]
    assert "files modified" in provenance.compare(fp, changed)


def test_missing_path(tmp_path):
    assert fingerprint(tmp_path / "nope") == {"exists": False}
    assert provenance.compare({"exists": False}, {"exists": False}) is None
    assert provenance.compare({"exists": False}, fingerprint(tmp_path)) == "created since"


def make(root: Path):
    (root / "in.txt").write_text("input\n")
    phase = Phase(id="merge", title="Merge", argv=("python", "-m", "pipeline.merge"),
                  inputs=(Path("in.txt"),), outputs=(Path("out"),))
    cfg = Config(path=root / "eagle3.yaml", name="t", vars={}, state_dir=root / "state", volumes=(),
                 phases=(phase,), fingerprint="cfg-sha")
    (root / "out").mkdir()
    (root / "out" / "train.jsonl").write_text("{}\n")
    return cfg, phase


def test_record_is_written_atomically_and_read_back(tmp_path):
    cfg, phase = make(tmp_path)
    rec = record_phase(cfg, phase, "20240101-000000")
    path = tmp_path / "state" / "provenance" / "merge.json"
    on_disk = json.loads(path.read_text())
    assert list(on_disk["inputs"]) == ["in.txt"] and list(on_disk["outputs"]) == ["out"]  # relative
    assert [p.name for p in path.parent.iterdir()] == ["merge.json"]  # no temp left behind
    assert rec["argv"] == ["python", "-m", "pipeline.merge"] and rec["run_id"] == "20240101-000000"
    assert rec["config_fingerprint"] == "cfg-sha" and rec["finished_at"] > 0
    assert str(tmp_path / "in.txt") in rec["inputs"] and str(tmp_path / "out") in rec["outputs"]
    assert read_record(tmp_path / "state", "merge") == rec
    assert read_record(tmp_path / "state", "extract") is None


def test_corrupt_record_reads_as_none(tmp_path):
    (tmp_path / "provenance").mkdir()
    (tmp_path / "provenance" / "merge.json").write_text('{"phase": "mer')
    assert read_record(tmp_path, "merge") is None


def test_changed_paths_names_inputs_and_outputs_with_why(tmp_path):
    cfg, phase = make(tmp_path)
    rec = record_phase(cfg, phase, "r1")
    assert changed_paths(rec) == []
    (tmp_path / "in.txt").write_text("input, edited\n")
    (tmp_path / "out" / "extra.jsonl").write_text("{}\n")
    changes = changed_paths(rec)
    assert changes == [f"input {tmp_path / 'in.txt'}: size 6 B -> 14 B",
                       f"output {tmp_path / 'out'}: files 1 -> 2, size 3 B -> 6 B"]
