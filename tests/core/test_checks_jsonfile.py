"""json_matches: the store's meta against the target's config, before training reads it."""

from __future__ import annotations

import json
from pathlib import Path

from core_harness import ctx_for

from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec


def check(arg, root):
    assert validate("json_matches", arg) is None
    spec = CheckSpec(kind="json_matches", arg=arg, name=default_name("json_matches", arg))
    return run_checks([spec], ctx_for(root))[0]


def write(root: Path, meta: dict, target: dict) -> None:
    (root / "store").mkdir()
    (root / "store" / "meta.json").write_text(json.dumps(meta))
    (root / "target").mkdir()
    (root / "target" / "config.json").write_text(json.dumps(target))


ARG = {"path": "store/meta.json", "same_as": "target/config.json",
       "keys": {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers"},
       "expect": {"dtype": "bfloat16", "capture_layers.2": 29}}


def test_store_meta_matches_target(tmp_path):
    write(tmp_path, {"hidden_size": 4096, "num_layers": 32, "dtype": "bfloat16", "capture_layers": [2, 16, 29]},
          {"hidden_size": 4096, "num_hidden_layers": 32})
    r = check(ARG, tmp_path)
    assert r.status == "pass", r.message
    assert "hidden_size=4096" in r.message and "num_layers=32" in r.message and "config.json" in r.message
    assert r.evidence["compared"]["num_layers"] == {"got": 32, "want": 32, "from": "config.json:num_hidden_layers"}


def test_store_from_another_target_fails_naming_both_values(tmp_path):
    write(tmp_path, {"hidden_size": 4096, "num_layers": 32, "dtype": "bfloat16", "capture_layers": [2, 16, 29]},
          {"hidden_size": 7168, "num_hidden_layers": 61})
    r = check(ARG, tmp_path)
    assert r.status == "fail"
    assert "hidden_size is 4096 but config.json hidden_size is 7168" in r.message
    assert "num_layers is 32 but config.json num_hidden_layers is 61" in r.message


def test_literal_expectations_and_missing_keys(tmp_path):
    write(tmp_path, {"hidden_size": 4096, "num_layers": 32, "dtype": "float32", "capture_layers": [2, 16]},
          {"hidden_size": 4096, "num_hidden_layers": 32})
    r = check(ARG, tmp_path)
    assert r.status == "fail"
    assert 'dtype is "float32", expected "bfloat16"' in r.message
    assert "capture_layers.2 is missing" in r.message


def test_missing_and_broken_files(tmp_path):
    r = check({"path": "store/meta.json", "expect": {"a": 1}}, tmp_path)
    assert r.status == "fail" and "store/meta.json does not exist" in r.message
    (tmp_path / "bad.json").write_text("{not json")
    r = check({"path": "bad.json", "expect": {"a": 1}}, tmp_path)
    assert r.status == "fail" and "not valid JSON" in r.message


def test_argument_shapes_are_validated_at_load_time():
    assert "same_as" in validate("json_matches", {"path": "m.json", "keys": {"a": "b"}})
    assert "expect" in validate("json_matches", {"path": "m.json"})
    assert "mapping" in validate("json_matches", {"path": "m.json", "expect": [1, 2]})
