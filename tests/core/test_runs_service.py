"""A service phase is ready while it runs and its readiness checks pass."""

from __future__ import annotations

import importlib.util
import socket
import time

import pytest
from core_harness import config_for

from console.core.checks.result import CheckResult
from console.core.model.config import CheckSpec, Phase
from console.core.runs import manager
from console.core.runs.manager import readiness, start_run, stop_run

READY = CheckSpec(kind="http_ok", arg="http://127.0.0.1:1/health", name="health")


def test_readiness_follows_the_run_and_its_checks(tmp_path, monkeypatch):
    answers = ["fail", "pass"]
    calls = []

    def fake_checks(config, phase, ctx=None):
        calls.append(phase.id)
        return [CheckResult("health", "http_ok", "error", answers.pop(0), "health endpoint")]

    monkeypatch.setattr(manager, "run_ready_checks", fake_checks)
    ph = Phase(id="serve", title="Serve", argv=("sleep", "30"), kind="service", ready=(READY,))
    cfg = config_for(tmp_path, ph)
    assert readiness(cfg, "serve") == (False, [])  # never started: no check is even run

    start_run(cfg, ph)
    try:
        ok, results = readiness(cfg, "serve")
        assert not ok and results[0].status == "fail"
        ok, results = readiness(cfg, "serve")
        assert ok and results[0].status == "pass"
    finally:
        stop_run(cfg, "serve", grace=1.0)
    assert readiness(cfg, "serve") == (False, [])
    assert calls == ["serve", "serve"]


def test_a_service_without_ready_checks_is_ready_while_running(tmp_path):
    ph = Phase(id="serve", title="Serve", argv=("sleep", "30"), kind="service")
    cfg = config_for(tmp_path, ph)
    start_run(cfg, ph)
    try:
        assert readiness(cfg, ph) == (True, [])
    finally:
        stop_run(cfg, "serve", grace=1.0)
    assert readiness(cfg, ph) == (False, [])


_REAL = all(importlib.util.find_spec(m) is not None
            for m in ("console.core.checks.registry", "console.core.checks.context"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not _REAL, reason="the check registry is not there yet")
def test_real_http_service_becomes_ready_and_stops(tmp_path):
    port = free_port()
    (tmp_path / "health").write_text("ok")
    go = tmp_path / "go"  # the server listens only once the test has seen it not ready
    ph = Phase(id="serve", title="Serve", kind="service",
               argv=("python", "-c", f"import os, time, http.server as h\n"
                     f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"  # wait-ok: the phase program's own work, not a test pause
                     f"h.ThreadingHTTPServer(('127.0.0.1', {port}), h.SimpleHTTPRequestHandler).serve_forever()"),
               ready=(CheckSpec(kind="http_ok", arg=f"http://127.0.0.1:{port}/health", name="health"),))
    cfg = config_for(tmp_path, ph)
    start_run(cfg, ph)
    try:
        ok, results = readiness(cfg, ph)
        assert not ok and results[0].status == "fail"  # not listening yet
        go.write_text("")
        deadline = time.monotonic() + 30
        while not ok and time.monotonic() < deadline:
            time.sleep(0.1)  # wait-ok: poll interval
            ok, results = readiness(cfg, ph)
        assert ok, results
    finally:
        assert stop_run(cfg, "serve", grace=2.0)
    assert readiness(cfg, ph) == (False, [])
