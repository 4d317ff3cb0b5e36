from __future__ import annotations

import os
from pathlib import Path

from console.core.checks.context import CheckContext
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec, Config, Phase
from console.core.records.provenance import record_phase


def setup(root: Path):
    (root / "raw").mkdir()
    (root / "raw" / "a.jsonl").write_text('{"a": 1}\n')
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").write_text('{"t": 1}\n{"t": 2}\n')
    merge = Phase(id="merge", title="Merge", argv=("python", "-m", "pipeline.merge"),
                  inputs=(Path("raw"),), outputs=(Path("data/train.jsonl"),))
    extract = Phase(id="extract", title="Extract", argv=("python", "-m", "pipeline.extract"),
                    needs=("merge",), inputs=(Path("data/train.jsonl"),), outputs=(Path("hidden"),))
    cfg = Config(path=root / "eagle3.yaml", name="t", vars={}, state_dir=root / "state", volumes=(),
                 phases=(merge, extract), fingerprint="f")
    return cfg, merge


def check(arg, ctx):
    assert validate("fresh", arg) is None
    return run_checks([CheckSpec(kind="fresh", arg=arg, name=default_name("fresh", arg))], ctx)[0]


def test_no_record_until_the_producing_phase_finishes(tmp_path):
    cfg, _ = setup(tmp_path)
    r = check("data/train.jsonl", CheckContext(cfg))
    assert r.status == "fail" and r.message == "no record: phase 'merge' has not finished"


def test_unchanged_output_passes(tmp_path):
    cfg, merge = setup(tmp_path)
    record_phase(cfg, merge, "run-1")
    r = check("data/train.jsonl", CheckContext(cfg))
    assert r.status == "pass", r.message
    assert "unchanged since phase 'merge' finished at" in r.message
    assert r.evidence["run_id"] == "run-1" and r.evidence["role"] == "output"


def test_rewritten_output_fails_saying_what_changed(tmp_path):
    cfg, merge = setup(tmp_path)
    record_phase(cfg, merge, "run-1")
    (tmp_path / "data" / "train.jsonl").write_text('{"t": 1}\n{"t": 2}\n{"t": 3}\n')
    r = check("data/train.jsonl", CheckContext(cfg))
    assert r.status == "fail"
    assert "changed since phase 'merge' finished" in r.message and "size 18 B -> 27 B" in r.message


def test_same_size_edit_is_caught_by_the_hash(tmp_path):
    cfg, merge = setup(tmp_path)
    record_phase(cfg, merge, "run-1")
    p = tmp_path / "data" / "train.jsonl"
    st = p.stat()
    p.write_text('{"t": 9}\n{"t": 2}\n')
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime restored
    r = check({"path": "data/train.jsonl"}, CheckContext(cfg))
    assert r.status == "fail" and "content changed" in r.message


def test_named_phase_and_an_input(tmp_path):
    cfg, merge = setup(tmp_path)
    record_phase(cfg, merge, "run-1")
    ctx = CheckContext(cfg)
    assert check({"path": "raw", "phase": "merge"}, ctx).status == "pass"
    (tmp_path / "raw" / "b.jsonl").write_text("{}\n")
    r = check({"path": "raw", "phase": "merge"}, ctx)
    assert r.status == "fail" and "files 1 -> 2" in r.message
    r = check({"path": "raw", "phase": "extract"}, ctx)
    assert r.status == "fail" and "phase 'extract' has not finished" in r.message
    r = check({"path": "raw", "phase": "mrege"}, ctx)
    assert r.status == "fail" and "no phase 'mrege'" in r.message


def test_deleted_output(tmp_path):
    cfg, merge = setup(tmp_path)
    record_phase(cfg, merge, "run-1")
    (tmp_path / "data" / "train.jsonl").unlink()
    r = check("data/train.jsonl", CheckContext(cfg))
    assert r.status == "fail" and r.message.endswith(": deleted")


def test_path_no_phase_produces(tmp_path):
    cfg, _ = setup(tmp_path)
    r = check("elsewhere.txt", CheckContext(cfg))
    assert r.status == "fail" and "no phase lists" in r.message and "phase:" in r.message
