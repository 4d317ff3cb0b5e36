from __future__ import annotations

import http.server
import os
import socket
import threading

import pytest
from core_harness import ctx_for

from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec


def check(kind, arg, ctx):
    assert validate(kind, arg) is None
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            body = b"ok"
        else:
            self.send_response(503)
            body = b"model still loading"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_http_ok_passes_with_the_status(server, tmp_path):
    r = check("http_ok", f"{server}/health", ctx_for(tmp_path))
    assert r.status == "pass"
    assert r.evidence["status"] == 200 and "answered HTTP 200" in r.message


def test_http_ok_fails_with_status_and_body(server, tmp_path):
    r = check("http_ok", {"url": f"{server}/generate"}, ctx_for(tmp_path))
    assert r.status == "fail"
    assert r.evidence["status"] == 503
    assert "answered HTTP 503, expected 200: model still loading" in r.message


def test_http_ok_expected_other_status(server, tmp_path):
    assert check("http_ok", {"url": f"{server}/x", "status": 503}, ctx_for(tmp_path)).status == "pass"


def test_http_ok_connection_refused(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/health"
    r = check("http_ok", {"url": url, "timeout": 2}, ctx_for(tmp_path))
    assert r.status == "fail" and "connection refused" in r.message


def test_http_ok_timeout(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/health"
        r = check("http_ok", {"url": url, "timeout": 0.3}, ctx_for(tmp_path))
        assert r.status == "fail" and "no answer within 0.3 s" in r.message
    finally:
        listener.close()


def test_port_free_passes_on_a_free_port(tmp_path):
    port = free_port()
    r = check("port_free", port, ctx_for(tmp_path))
    assert r.status == "pass" and f"port {port} on 127.0.0.1 is free" == r.message


def test_port_free_fails_naming_the_listening_pid(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        r = check("port_free", {"port": str(port)}, ctx_for(tmp_path))  # ${port} arrives as text
    finally:
        s.close()
    assert r.status == "fail"
    assert r.evidence["pid"] == os.getpid()
    assert f"port {port} on 127.0.0.1 is in use by pid {os.getpid()}" in r.message


@pytest.mark.parametrize("kind,arg,problem", [
    ("port_free", 70000, "must be 1..65535"),
    ("port_free", "http", "whole number"),
    ("http_ok", "localhost:30000/health", "must be an http:// or https:// URL"),
    ("http_ok", {"url": "http://x", "timeout": "soon"}, "timeout must be a number"),
])
def test_bad_net_arguments(kind, arg, problem):
    msg = validate(kind, arg)
    assert msg is not None and problem in msg


class InfoHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"model_path": "/models/Kimi-K2.5", "is_generation": true}' if self.path == "/model_info" else b"<html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def info_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), InfoHandler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_http_ok_json_passes_when_the_server_serves_the_configured_model(info_server, tmp_path):
    r = check("http_ok", {"url": f"{info_server}/model_info", "json": {"model_path": "/models/Kimi-K2.5"}},
              ctx_for(tmp_path))
    assert r.status == "pass" and "/models/Kimi-K2.5" in r.message


def test_http_ok_json_fails_naming_the_model_the_server_serves(info_server, tmp_path):
    r = check("http_ok", {"url": f"{info_server}/model_info", "json": {"model_path": "/models/Llama-3.1-8B"}},
              ctx_for(tmp_path))
    assert r.status == "fail"
    assert 'model_path is "/models/Kimi-K2.5", expected "/models/Llama-3.1-8B"' in r.message


def test_http_ok_json_fails_on_an_answer_that_is_not_json(info_server, tmp_path):
    r = check("http_ok", {"url": f"{info_server}/other", "json": {"model_path": "x"}}, ctx_for(tmp_path))
    assert r.status == "fail" and "not JSON" in r.message


def test_http_ok_json_must_be_a_mapping():
    assert "json" in (validate("http_ok", {"url": "http://127.0.0.1:1/x", "json": "model_path"}) or "")
