from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from core_harness import ctx_for

from console.core.checks import registry
from console.core.checks.kind import Outcome
from console.core.checks.registry import KINDS, default_name, run_checks, validate
from console.core.model.config import CheckSpec

DESIGN_KINDS = {"exists", "absent", "contains", "lacks", "free_space", "shm_free", "gpu_free_memory",
                "gpus_idle", "port_free", "http_ok", "python_import", "patch_applied", "jsonl_records",
                "fresh", "command"}


def with_run(monkeypatch, kind: str, fn):
    monkeypatch.setitem(registry._ALL, kind, dataclasses.replace(registry.kind(kind), run=fn))


def test_every_design_kind_is_known():
    assert set(KINDS) >= DESIGN_KINDS


def test_each_family_declares_the_kinds_the_registry_imports_it_for():
    """A kind added to a family but not to FAMILIES would be refused as unknown in every config."""
    for family, names in registry.FAMILIES.items():
        declared = importlib.import_module(f"console.core.checks.{family}").KINDS
        assert tuple(k.name for k in declared) == names, family
        assert all(registry.kind(name) is k for name, k in zip(names, declared))
    assert registry.kind("exist") is None


def test_a_config_loads_and_checks_with_only_the_families_it_names(tmp_path):
    """A launcher reloads its config to verify its run: one whose checks are all `exists`
    and `absent` imports no other family (all of them cost it a fifth of its start)."""
    (tmp_path / "p.yaml").write_text("name: p\nphases:\n  - id: a\n    run: [\"true\"]\n"
                                     "    checks: [{exists: p.yaml}]\n    verify: [{absent: nothing}]\n")
    probe = ("import json, sys\n"
             "from console.core.checks.context import CheckContext\n"
             "from console.core.checks.registry import run_checks\n"
             "from console.core.config.loader import load_config\n"
             "config = load_config(sys.argv[1]); phase = config.phase('a')\n"
             "results = run_checks([*phase.checks, *phase.verify], CheckContext(config, phase))\n"
             "print(json.dumps([r.status for r in results]))\n"
             "print(json.dumps([m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('console.core.checks.')]))\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "p.yaml")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    statuses, loaded = map(json.loads, done.stdout.splitlines())
    assert statuses == ["pass", "pass"]
    assert set(loaded) & set(registry.FAMILIES) == {"fs"}


def test_unknown_kind_suggests_the_close_one():
    msg = validate("free_spcae", {"path": "/", "need": "1GB"})
    assert "unknown check kind 'free_spcae'" in msg and "did you mean 'free_space'?" in msg
    assert "exists" in msg  # lists the known ones


@pytest.mark.parametrize("kind,arg,name", [
    ("exists", "/data/raw", "exists:/data/raw"),
    ("exists", {"path": "/very/long/path/that/goes/on/and/on/to/the/raw/data"}, "exists:…/raw/data"),
    ("free_space", {"path": "/data", "need": "1GB"}, "free_space:/data"),
    ("contains", {"path": "scripts/extract.py", "pattern": "synth_100k"}, "contains:extract.py:synth_100k"),
    ("port_free", 30000, "port_free:30000"),
    ("http_ok", "http://127.0.0.1:30000/health", "http_ok:127.0.0.1:30000/health"),
    ("python_import", "sglang", "python_import:sglang"),
    ("patch_applied", {"patch": "patches/sglang-eagle3.patch", "module": "sglang"}, "patch_applied:sglang-eagle3.patch"),
    ("gpus_idle", None, "gpus_idle"),
    ("gpu_free_memory", {"need": "70GB", "gpus": [0, 1]}, "gpu_free_memory:0,1"),
    ("free_space", {"path": "/data", "need": "bad need"}, "free_space:/data"),
])
def test_default_names(kind, arg, name):
    assert default_name(kind, arg) == name


def test_results_come_back_in_spec_order_and_run_concurrently(tmp_path, monkeypatch):
    barrier = threading.Barrier(3, timeout=5)

    def meet(args, ctx):
        barrier.wait()  # only returns if all three checks run at the same time
        return Outcome(True, f"met {args['path']}")

    with_run(monkeypatch, "exists", meet)
    specs = [CheckSpec("exists", p, p) for p in ("c", "a", "b")]
    results = run_checks(specs, ctx_for(tmp_path))
    assert [r.name for r in results] == ["c", "a", "b"]
    assert [r.message for r in results] == ["met c", "met a", "met b"]


def test_a_crash_is_a_failure_and_the_others_still_run(tmp_path, monkeypatch):
    def boom(args, ctx):
        raise KeyError("tokens")

    with_run(monkeypatch, "lacks", boom)
    specs = [CheckSpec("lacks", {"path": "x", "pattern": "y"}, "broken"), CheckSpec("absent", "nothing-here", "ok")]
    broken, ok = run_checks(specs, ctx_for(tmp_path))
    assert broken.status == "fail" and broken.message == "check crashed: KeyError: 'tokens'"
    assert broken.evidence["error"] == "KeyError: 'tokens'"
    assert ok.status == "pass"


def test_a_hung_check_times_out_and_the_others_still_run(tmp_path, monkeypatch):
    release = threading.Event()

    def hang(args, ctx):
        release.wait(10)
        return Outcome(True, "late")

    with_run(monkeypatch, "exists", hang)
    try:
        hung, ok = run_checks([CheckSpec("exists", "/", "stuck-nfs"), CheckSpec("absent", "nothing", "ok")],
                              ctx_for(tmp_path), timeout=0.3)
    finally:
        release.set()
    assert hung.status == "fail" and "timed out after 0.3 s" in hung.message
    assert ok.status == "pass"


def test_a_kind_with_its_own_timeout_gets_that_long(tmp_path):
    spec = CheckSpec("command", {"argv": ["true"], "timeout": 100}, "c")
    assert registry._deadline(spec, 30) >= 100
    assert registry._deadline(CheckSpec("exists", "/", "e"), 30) == 30


def test_overrides_mark_failures_with_the_reason(tmp_path):
    specs = [CheckSpec("exists", "missing", "raw-present"), CheckSpec("absent", "missing", "out-clean"),
             CheckSpec("exists", "missing2", "other", severity="warning")]
    reasons = {"raw-present": "raw data is on the other volume today", "out-clean": "n/a",
               "other": "known"}
    raw, clean, other = run_checks(specs, ctx_for(tmp_path), overrides=reasons)
    assert raw.status == "fail" and raw.overridden and raw.reason == reasons["raw-present"]
    assert not raw.blocking
    assert clean.status == "pass" and not clean.overridden and clean.reason is None
    assert other.status == "warn" and other.overridden


def test_unoverridden_error_blocks_and_warning_does_not(tmp_path):
    err, warn = run_checks([CheckSpec("exists", "missing", "e"), CheckSpec("exists", "missing", "w", severity="warning")],
                           ctx_for(tmp_path))
    assert (err.status, err.blocking) == ("fail", True)
    assert (warn.status, warn.blocking) == ("warn", False)


def test_bad_argument_at_run_time_is_a_failure_not_an_exception(tmp_path):
    r, unknown = run_checks([CheckSpec("port_free", "http", "p"), CheckSpec("exist", "/", "typo")], ctx_for(tmp_path))
    assert r.status == "fail" and r.message.startswith("bad argument: port must be a whole number")
    assert unknown.status == "fail" and "did you mean 'exists'" in unknown.message


def test_results_are_json_serialisable(tmp_path):
    (tmp_path / "s.py").write_text("x = 1\n")
    specs = [CheckSpec(k, a, k) for k, a in [("exists", "s.py"), ("contains", {"path": "s.py", "pattern": "x"}),
                                             ("free_space", {"path": ".", "need": "1B"}),
                                             ("jsonl_records", "s.py")]]
    for r in run_checks(specs, ctx_for(tmp_path)):
        json.dumps(r.to_json())


def test_a_port_written_3e4_is_read_as_an_expression_reads_it(tmp_path):
    """YAML reads `port: 3e4` as text; a check reads it with the one number reader the
    expressions use, so it is 30000 there as in `need: 3e4 * 8`. Not a whole number: refused."""
    specs = [CheckSpec("port_free", {"port": p}, f"p{i}") for i, p in enumerate(("3e4", "7e4", "2.5", "inf"))]
    read, big, half, inf = run_checks(specs, ctx_for(tmp_path))
    assert "bad argument" not in read.message and read.evidence["port"] == 30000
    assert big.message == "bad argument: port must be 1..65535, got 70000"
    for r, text in ((half, "'2.5'"), (inf, "'inf'")):
        assert r.status == "fail" and r.message.startswith("bad argument: port must be a whole number") and text in r.message
