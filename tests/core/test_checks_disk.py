from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from core_harness import ctx_for

from console.core.checks import disk
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec, Phase


def check(kind, arg, ctx):
    assert validate(kind, arg) is None
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


@pytest.fixture
def free_1_2_tb(monkeypatch):
    seen = []

    def fake(path):
        seen.append(Path(path))
        return 1_200_000_000_000, 4_000_000_000_000

    monkeypatch.setattr(disk, "free_bytes", fake)
    return seen


def test_free_space_passes_with_real_statvfs(tmp_path):
    r = check("free_space", {"path": ".", "need": "1MB"}, ctx_for(tmp_path))
    assert r.status == "pass"
    assert r.evidence["free_bytes"] > 1_000_000 and r.evidence["need_bytes"] == 1_000_000


def test_free_space_fails_with_real_statvfs(tmp_path):
    r = check("free_space", {"path": ".", "need": "1000PB"}, ctx_for(tmp_path))
    assert r.status == "fail" and "only" in r.message and "short by" in r.message


def test_free_space_expression_over_stats_message_and_evidence(tmp_path, free_1_2_tb):
    (tmp_path / "stats.json").write_text(json.dumps({"tokens": 100_000_000, "records": 5}))
    arg = {"path": "out/hidden", "need": "stats.tokens * 4096 * 2 * 1.0065",
           "values": {"stats": "stats.json"}}
    r = check("free_space", arg, ctx_for(tmp_path))
    assert r.status == "pass"
    need = 100_000_000 * 4096 * 2 * 1.0065
    assert r.evidence["need_bytes"] == pytest.approx(need, abs=1)
    assert r.evidence["values"] == {"stats.tokens": 100_000_000}
    assert r.evidence["need"] == arg["need"]
    # The output folder does not exist yet: the nearest existing parent is measured.
    assert free_1_2_tb == [tmp_path]
    assert r.evidence["checked"] == str(tmp_path)
    assert r.message == f"need 824.5 GB on {tmp_path}/out/hidden (on {tmp_path}), 1.2 TB free"


def test_free_space_shortfall_message(tmp_path, free_1_2_tb):
    r = check("free_space", {"path": ".", "need": "1.5TB"}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.message == f"need 1.5 TB on {tmp_path}, only 1.2 TB free (short by 300.0 GB)"
    assert r.evidence["free_bytes"] == 1_200_000_000_000


def test_free_space_need_from_a_command_printing_json(tmp_path, free_1_2_tb):
    estimate = [sys.executable, "-c", "import json; print(json.dumps({'bytes': 2 * 10**12}))"]
    arg = {"path": ".", "need": "est.bytes", "values": {"est": {"command": estimate}}}
    r = check("free_space", arg, ctx_for(tmp_path))
    assert r.status == "fail"
    assert "need 2.0 TB" in r.message
    assert r.evidence["values"] == {"est.bytes": 2 * 10**12}


def test_missing_stats_file_names_the_phase_to_run(tmp_path, free_1_2_tb):
    merge = Phase(id="merge", title="Merge", argv=("true",), outputs=(Path("data"),))
    arg = {"path": ".", "need": "stats.tokens * 8", "values": {"stats": "data/stats.json"}}
    r = check("free_space", arg, ctx_for(tmp_path, [merge]))
    assert r.status == "fail"
    assert "data/stats.json does not exist" in r.message and "phase 'merge' writes it" in r.message


def test_failing_value_command_is_reported(tmp_path, free_1_2_tb):
    arg = {"path": ".", "need": "est.bytes",
           "values": {"est": {"command": [sys.executable, "-c", "import sys; sys.exit('no model')"]}}}
    r = check("free_space", arg, ctx_for(tmp_path))
    assert r.status == "fail" and "exited 1" in r.message and "no model" in r.message


def test_shm_free_passes_and_fails(tmp_path):
    ctx = ctx_for(tmp_path)
    ok = check("shm_free", {"need": "1KB", "path": str(tmp_path)}, ctx)
    assert ok.status == "pass" and ok.evidence["path"] == str(tmp_path)
    bad = check("shm_free", {"need": "1000PB", "path": str(tmp_path)}, ctx)
    assert bad.status == "fail" and "need 1.0 EB" in bad.message and "short by" in bad.message


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this host")
def test_shm_free_reads_dev_shm_by_default(tmp_path):
    r = check("shm_free", "1B", ctx_for(tmp_path))
    assert r.status == "pass" and r.evidence["path"] == "/dev/shm"


def test_shm_free_scalar_defaults_to_dev_shm():
    assert validate("shm_free", "16GiB") is None
    assert default_name("shm_free", "16GiB") == "shm_free"


def test_shm_free_missing_mount_fails(tmp_path):
    r = check("shm_free", {"need": "1KB", "path": str(tmp_path / "no-shm")}, ctx_for(tmp_path))
    assert r.status == "fail" and "does not exist" in r.message


@pytest.mark.parametrize("arg,problem", [
    (["/data"], "free_space needs {path, need, values?}; got a list"),
    ({"path": "/data"}, "'need' is missing"),
    ({"path": "/data", "need": "500 GX"}, "'500 GX' is not a size"),
    ({"path": "/data", "need": "stats.tokens * 2"}, "reads 'stats' but values defines none"),
    ({"path": "/data", "need": "open('x')"}, "calling open is not allowed"),
    ({"path": "/data", "need": "1GB", "values": {"stats": {"cmd": ["x"]}}}, "{command: [argv...]"),
])
def test_bad_free_space_arguments(arg, problem):
    msg = validate("free_space", arg)
    assert msg is not None and problem in msg
