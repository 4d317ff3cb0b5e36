"""A check that reads a stage's record (its stats, its `--estimate --json` line) reads it through
the record: a figure from a record of a version this console does not know, or with a field of
the wrong type, is never lent to a check; the check fails naming the file, the version and what
to do. JSON that is no record (a target's config.json) is read as it is."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import record_samples
from core_harness import ctx_for

from console.core.checks import disk
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec
from pipeline.records import merge_stats, train_estimate


def check(kind, arg, ctx):
    assert validate(kind, arg) is None
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


@pytest.fixture
def roomy(monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda _path: (10**15, 4 * 10**15))


def _stats(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "train.stats.json"
    merge_stats.write_stats(path, record_samples.merge_stats([{"input_ids": [1] * 50, "loss_mask": [1] * 50}] * 4,
                                                             "ab" * 32))
    if changes:
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return path


def test_a_need_over_merge_stats_reads_them_through_their_record(tmp_path, roomy):
    _stats(tmp_path)
    r = check("free_space", {"path": ".", "need": "stats.tokens * 8", "values": {"stats": "train.stats.json"}},
              ctx_for(tmp_path))
    assert r.status == "pass" and r.evidence["values"] == {"stats.tokens": 200}


def test_merge_stats_of_a_version_this_console_does_not_know_fail_the_check_naming_the_file(tmp_path, roomy):
    path = _stats(tmp_path, version=999)
    r = check("free_space", {"path": ".", "need": "stats.tokens * 8", "values": {"stats": "train.stats.json"}},
              ctx_for(tmp_path))
    assert r.status == "fail"
    assert f"{path}: a merge stats file of version 999" in r.message and "rerun python -m pipeline.merge" in r.message


def test_a_stats_field_of_the_wrong_type_fails_the_check_naming_the_key(tmp_path):
    _stats(tmp_path, records="many")
    r = check("json_matches", {"path": "train.stats.json", "expect": {"records": 4}}, ctx_for(tmp_path))
    assert r.status == "fail" and "records: expected a whole number" in r.message


def test_an_estimate_line_of_an_unknown_version_fails_the_gpu_check_naming_the_command(tmp_path):
    line = json.dumps({**json.loads(train_estimate.format_estimate(record_samples.train_estimate())), "version": 7})
    arg = {"need": "estimate.gpu_bytes",
           "values": {"estimate": {"command": [sys.executable, "-c", f"print({line!r})"], "timeout": 30}}}
    r = check("gpu_free_memory", arg, ctx_for(tmp_path))
    assert r.status == "fail" and "a training estimate of version 7" in r.message


def test_json_that_is_no_record_is_read_as_it_is_and_a_fifo_is_refused_not_waited_on(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "record": None}))
    r = check("json_matches", {"path": "config.json", "expect": {"hidden_size": 64}}, ctx_for(tmp_path))
    assert r.status == "pass"
    os.mkfifo(tmp_path / "fifo.json")
    r = check("json_matches", {"path": "fifo.json", "expect": {"hidden_size": 64}}, ctx_for(tmp_path))
    assert r.status == "fail" and "not a regular file" in r.message
