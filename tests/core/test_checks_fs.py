from __future__ import annotations

from core_harness import ctx_for

from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec


def check(kind, arg, ctx, severity="error"):
    assert validate(kind, arg) is None
    spec = CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg), severity=severity)
    return run_checks([spec], ctx)[0]


def test_exists_passes_with_size_and_file_count(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_bytes(b"x" * 1500)
    (raw / "sub").mkdir()
    (raw / "sub" / "b.jsonl").write_bytes(b"y" * 500)
    r = check("exists", "raw", ctx_for(tmp_path))  # relative: resolved against the config folder
    assert r.status == "pass"
    assert r.evidence["files"] == 2 and r.evidence["bytes"] == 2000
    assert str(raw) in r.message and "2 files" in r.message and "2.0 KB" in r.message


def test_exists_fails_naming_the_missing_path_and_nearest_parent(tmp_path):
    r = check("exists", {"path": "data/raw/x.jsonl"}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.message.startswith(f"{tmp_path}/data/raw/x.jsonl does not exist")
    assert r.evidence["nearest_existing"] == str(tmp_path)


def test_exists_reports_a_broken_symlink(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    r = check("exists", "link", ctx_for(tmp_path))
    assert r.status == "fail" and "broken symlink" in r.message


def test_absent_passes_when_missing_and_fails_with_what_is_there(tmp_path):
    ctx = ctx_for(tmp_path)
    assert check("absent", "out", ctx).status == "pass"
    (tmp_path / "out").write_bytes(b"z" * 2_500_000)
    r = check("absent", "out", ctx)
    assert r.status == "fail"
    assert "still exists" in r.message and "2.5 MB" in r.message
    assert r.evidence["bytes"] == 2_500_000


def test_contains_reports_line_number_and_matching_line(tmp_path):
    script = tmp_path / "extract.py"
    script.write_text("import json\n\nDATA = '/data/synth_100k/train.jsonl'\nrun(DATA)\n")
    r = check("contains", {"path": "extract.py", "pattern": r"synth_100k"}, ctx_for(tmp_path))
    assert r.status == "pass"
    assert r.evidence["line_number"] == 3
    assert r.evidence["line"] == "DATA = '/data/synth_100k/train.jsonl'"
    assert f"{script}:3" in r.message


def test_contains_is_multiline_and_fails_when_absent(tmp_path):
    (tmp_path / "s.py").write_text("a = 1\nDATA = '/data/old/train.jsonl'\n")
    ctx = ctx_for(tmp_path)
    assert check("contains", {"path": "s.py", "pattern": r"^DATA = "}, ctx).evidence["line_number"] == 2
    r = check("contains", {"path": "s.py", "pattern": "synth_100k"}, ctx)
    assert r.status == "fail"
    assert "/synth_100k/ not found" in r.message and "2 lines" in r.message


def test_contains_on_a_missing_file_fails_clearly(tmp_path):
    r = check("contains", {"path": "nope.py", "pattern": "x"}, ctx_for(tmp_path))
    assert r.status == "fail" and "nope.py does not exist" in r.message


def test_lacks_passes_without_match_and_fails_showing_the_line(tmp_path):
    (tmp_path / "s.py").write_text("x = 1\nDATA = '/data/old_dataset/train.jsonl'\n")
    ctx = ctx_for(tmp_path)
    assert check("lacks", {"path": "s.py", "pattern": "synth"}, ctx).status == "pass"
    r = check("lacks", {"path": "s.py", "pattern": "old_dataset"}, ctx)
    assert r.status == "fail"
    assert r.evidence["line_number"] == 2
    assert "still matches" in r.message and "DATA = '/data/old_dataset/train.jsonl'" in r.message


def test_warning_severity_reports_warn(tmp_path):
    r = check("exists", "missing", ctx_for(tmp_path), severity="warning")
    assert r.status == "warn" and not r.blocking
