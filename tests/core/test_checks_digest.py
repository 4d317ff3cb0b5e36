"""sha256: a dataset is the one its stats describe, not merely one with as many records."""

from __future__ import annotations

import hashlib
import json

from core_harness import ctx_for

from console.core.checks import digest
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec

ARG = {"path": "train.jsonl", "equals": "stats.dataset_sha256", "values": {"stats": "train.stats.json"}}


def check(arg, ctx):
    assert validate("sha256", arg) is None
    return run_checks([CheckSpec(kind="sha256", arg=arg, name=default_name("sha256", arg))], ctx)[0]


def _merged(root, lines: list[str], stats_lines: list[str] | None = None) -> None:
    """A dataset and stats as merge writes them; `stats_lines` describes another dataset."""
    (root / "train.jsonl").write_text("".join(f"{line}\n" for line in lines))
    described = "".join(f"{line}\n" for line in (stats_lines if stats_lines is not None else lines))
    stats = {"records": len(lines), "dataset_sha256": hashlib.sha256(described.encode()).hexdigest()}
    (root / "train.stats.json").write_text(json.dumps(stats))


def test_passes_when_the_dataset_is_the_one_its_stats_describe(tmp_path):
    _merged(tmp_path, ['{"id": "a"}', '{"id": "b"}'])
    r = check(ARG, ctx_for(tmp_path))
    assert r.status == "pass", r.message
    assert "matches stats.dataset_sha256" in r.message
    assert r.evidence["sha256"] == hashlib.sha256((tmp_path / "train.jsonl").read_bytes()).hexdigest()


def test_fails_when_a_new_dataset_sits_beside_old_stats_with_the_same_record_count(tmp_path):
    _merged(tmp_path, ['{"id": "new-1"}', '{"id": "new-2"}'], stats_lines=['{"id": "old-1"}', '{"id": "old-2"}'])
    ctx = ctx_for(tmp_path)
    same_count = run_checks([CheckSpec(kind="jsonl_records", name="n", arg={
        "path": "train.jsonl", "equals": "stats.records", "values": {"stats": "train.stats.json"}})], ctx)[0]
    assert same_count.status == "pass"  # what the configs checked before: it cannot tell
    r = check(ARG, ctx)
    assert r.status == "fail"
    assert "is not the one recorded" in r.message and "rerun" in r.message


def test_missing_stats_or_key_names_what_is_missing(tmp_path):
    (tmp_path / "train.jsonl").write_text("{}\n")
    r = check(ARG, ctx_for(tmp_path))
    assert r.status == "fail" and "train.stats.json does not exist" in r.message
    (tmp_path / "train.stats.json").write_text(json.dumps({"records": 1}))
    r = check(ARG, ctx_for(tmp_path))
    assert r.status == "fail" and "stats.dataset_sha256 is missing" in r.message


def test_a_literal_digest_and_a_file_over_max_size(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"x" * 3000)
    want = hashlib.sha256(b"x" * 3000).hexdigest()
    assert check({"path": "f.bin", "equals": want.upper()}, ctx_for(tmp_path)).status == "pass"
    r = check({"path": "f.bin", "equals": want, "max_size": "1KB"}, ctx_for(tmp_path))
    assert r.status == "fail" and "over this check's max_size" in r.message and "raise max_size" in r.message


def test_bad_arguments_are_refused_at_load_time():
    assert "values defines none" in validate("sha256", {"path": "f", "equals": "stats.dataset_sha256"})
    assert "64 hex digits or NAME.key" in validate("sha256", {"path": "f", "equals": "abc"})
    assert "'equals' is missing" in validate("sha256", {"path": "f"})


def test_hashing_reads_a_big_file_in_bounded_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(digest, "BLOCK", 64 * 1024)
    data = bytes(range(256)) * 40_000  # 10 MB
    (tmp_path / "big.bin").write_bytes(data)
    reads: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def readinto(self, buf):
            n = self.f.readinto(buf)
            reads.append(n)
            return n

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(digest, "open", lambda *a, **k: Spy(real_open(*a, **k)), raising=False)
    assert digest.file_sha256(tmp_path / "big.bin") == hashlib.sha256(data).hexdigest()
    assert max(reads) <= 64 * 1024 and len(reads) > len(data) // (64 * 1024)
