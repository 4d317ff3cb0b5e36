from __future__ import annotations

import json
from pathlib import Path

import pytest
from core_harness import ctx_for

from console.core.checks import data
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec, Phase


def check(kind, arg, ctx):
    assert validate(kind, arg) is None
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


def write_jsonl(path: Path, n: int, final_newline: bool = True) -> None:
    text = "\n".join(json.dumps({"id": i, "text": "hello " * (i % 5)}) for i in range(n))
    path.write_text(text + ("\n" if final_newline else ""))


def test_counts_records_and_passes_with_default_min(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", 1234)
    r = check("jsonl_records", "train.jsonl", ctx_for(tmp_path))
    assert r.status == "pass"
    assert r.evidence["records"] == 1234
    assert "1,234 records" in r.message


def test_final_line_without_newline_counts(tmp_path):
    write_jsonl(tmp_path / "t.jsonl", 7, final_newline=False)
    assert data.count_lines(tmp_path / "t.jsonl")[0] == 7
    assert check("jsonl_records", {"path": "t.jsonl", "equals": 7}, ctx_for(tmp_path)).status == "pass"


def test_empty_file_fails_default_min(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    r = check("jsonl_records", "t.jsonl", ctx_for(tmp_path))
    assert r.status == "fail" and "0 records, need at least 1" in r.message


def test_min_and_max_bounds(tmp_path):
    write_jsonl(tmp_path / "t.jsonl", 50)
    ctx = ctx_for(tmp_path)
    r = check("jsonl_records", {"path": "t.jsonl", "min": 100}, ctx)
    assert r.status == "fail" and "50 records, need at least 100" in r.message
    r = check("jsonl_records", {"path": "t.jsonl", "max": 10}, ctx)
    assert r.status == "fail" and "more than the 10 allowed" in r.message
    assert check("jsonl_records", {"path": "t.jsonl", "min": 10, "max": 50}, ctx).status == "pass"


def test_equals_an_expression_over_a_phase_stats(tmp_path):
    write_jsonl(tmp_path / "t.jsonl", 20)
    (tmp_path / "stats.json").write_text(json.dumps({"records": 20, "dropped": 2}))
    ctx = ctx_for(tmp_path)
    ok = check("jsonl_records", {"path": "t.jsonl", "equals": "stats.records", "values": {"stats": "stats.json"}}, ctx)
    assert ok.status == "pass"
    assert ok.evidence["values"] == {"stats.records": 20}
    bad = check("jsonl_records", {"path": "t.jsonl", "equals": "stats.records + stats.dropped",
                                  "values": {"stats": "stats.json"}}, ctx)
    assert bad.status == "fail"
    assert "20 records, expected exactly 22 (stats.records + stats.dropped)" in bad.message


def test_truncated_last_line_fails_naming_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    write_jsonl(p, 100)
    with open(p, "a") as f:
        f.write('{"id": 100, "text": "cut of')  # a writer that died mid-record
    r = check("jsonl_records", "t.jsonl", ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.evidence["bad_line"] == 101
    assert "line 101 of 101 is malformed" in r.message and "not valid JSON" in r.message


def test_header_line_fails_naming_line_one(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("id,text\n" + "\n".join(json.dumps({"i": i}) for i in range(10)) + "\n")
    r = check("jsonl_records", "t.jsonl", ctx_for(tmp_path))
    assert r.status == "fail" and r.evidence["bad_line"] == 1


def test_blank_line_at_the_end_is_reported(tmp_path):
    p = tmp_path / "t.jsonl"
    write_jsonl(p, 10)
    with open(p, "a") as f:
        f.write("\n")
    r = check("jsonl_records", "t.jsonl", ctx_for(tmp_path))
    assert r.status == "fail" and "line 11 of 11 is malformed: it is empty" in r.message


def test_long_last_record_spanning_blocks_is_parsed(tmp_path, monkeypatch):
    p = tmp_path / "t.jsonl"
    write_jsonl(p, 5)
    with open(p, "a") as f:
        f.write(json.dumps({"text": "x" * 3_000_000}) + "\n")
    monkeypatch.setattr(data, "BLOCK", 4096)
    r = check("jsonl_records", {"path": "t.jsonl", "equals": 6}, ctx_for(tmp_path))
    assert r.status == "pass", r.message


def test_missing_file_names_the_phase_that_writes_it(tmp_path):
    merge = Phase(id="merge", title="Merge", argv=("true",), outputs=(Path("data/train.jsonl"),))
    r = check("jsonl_records", "data/train.jsonl", ctx_for(tmp_path, [merge]))
    assert r.status == "fail"
    assert "does not exist" in r.message and "phase 'merge' writes it" in r.message


@pytest.mark.parametrize("arg,problem", [
    ({"path": "t.jsonl", "min": "lots"}, "reads 'lots'"),
    ({"path": "t.jsonl", "min": 10, "max": 5}, "min (10) is larger than max (5)"),
    ({"path": "t.jsonl", "mni": 1}, "did you mean 'min'"),
    (["t.jsonl"], "got a list"),
])
def test_bad_arguments_are_caught_at_load_time(arg, problem):
    msg = validate("jsonl_records", arg)
    assert msg is not None and problem in msg
