"""Network: port_free (the server's port is not taken by a leftover one) and http_ok
(a service answers, e.g. SGLang's /health; with `json: {model_path: ...}` it also says
which model it serves, e.g. SGLang's /model_info)."""

from __future__ import annotations

import errno
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import psutil

from console.core.checks.context import CheckContext
from console.core.checks.jsonfile import _MISSING, _same, _show, dig
from console.core.checks.kind import Field, Kind, Outcome

BODY_EXCERPT = 200
JSON_BODY_MAX = 1 << 20


def listener(port: int) -> dict[str, Any]:
    """Who listens on `port`: pid, process name and command line where the OS lets us see."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, PermissionError, OSError):
        return {"pid": None, "why": "not allowed to list sockets"}
    for c in conns:
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN:
            if c.pid is None:
                return {"pid": None, "why": "owned by another user"}
            info: dict[str, Any] = {"pid": c.pid}
            try:
                proc = psutil.Process(c.pid)
                info["process"] = proc.name()
                info["cmdline"] = " ".join(proc.cmdline())[:300]
            except (psutil.Error, OSError):
                pass
            return info
    return {"pid": None, "why": "no listening socket found"}


def run_port_free(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    port, host = args["port"], args["host"]
    ev: dict[str, Any] = {"port": port, "host": host}
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return Outcome(False, f"cannot resolve host {host}: {e.strerror or e}", ev)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Servers set SO_REUSEADDR, so a port in TIME_WAIT is free for them; only a listener blocks.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        ev["error"] = e.strerror or str(e)
        if e.errno == errno.EADDRINUSE:
            who = listener(port)
            ev.update(who)
            if who.get("pid"):
                what = who.get("cmdline") or who.get("process") or ""
                by = f"pid {who['pid']}" + (f" ({what[:80]})" if what else "")
            else:
                by = f"another process ({who.get('why')})"
            return Outcome(False, f"port {port} on {host} is in use by {by}", ev)
        return Outcome(False, f"cannot bind port {port} on {host}: {e.strerror or e}", ev)
    finally:
        sock.close()
    return Outcome(True, f"port {port} on {host} is free", ev)


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = (urlsplit(url).hostname or "").lower()
    local = host in ("localhost", "::1") or host.startswith("127.")
    # A cluster's http_proxy must not swallow a health check of a local server.
    return urllib.request.build_opener(urllib.request.ProxyHandler({})) if local else urllib.request.build_opener()


def run_http_ok(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    url, want, timeout = args["url"], args["status"], args["timeout"]
    ev: dict[str, Any] = {"url": url, "expected_status": want}
    started = time.monotonic()
    body = b""
    want_json = args.get("json") or {}
    try:
        with _opener(url).open(url, timeout=timeout) as resp:
            status = resp.status
            body = resp.read(JSON_BODY_MAX + 1 if want_json else BODY_EXCERPT)
    except urllib.error.HTTPError as e:
        status = e.code
        try:
            body = e.read(BODY_EXCERPT)
        except OSError:
            body = b""
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            text = f"no answer within {timeout:g} s"
        elif isinstance(reason, ConnectionRefusedError):
            text = "connection refused (is the server running?)"
        else:
            text = getattr(reason, "strerror", None) or str(reason)
        ev["error"] = text
        return Outcome(False, f"{url}: {text}", ev)
    except TimeoutError:
        ev["error"] = f"no answer within {timeout:g} s"
        return Outcome(False, f"{url}: no answer within {timeout:g} s", ev)
    except (OSError, ValueError) as e:
        ev["error"] = str(e)
        return Outcome(False, f"{url}: {e}", ev)
    ev["status"] = status
    ev["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
    if status != want:
        excerpt = body.decode("utf-8", "replace").strip()
        if excerpt:
            ev["body"] = excerpt
        return Outcome(False, f"{url} answered HTTP {status}, expected {want}"
                              + (f": {excerpt[:80]}" if excerpt else ""), ev)
    if want_json:
        return _json_fields(url, status, body, want_json, ev)
    return Outcome(True, f"{url} answered HTTP {status}", ev)


def _json_fields(url: str, status: int, body: bytes, want: dict[str, Any], ev: dict[str, Any]) -> Outcome:
    """Fields of the JSON answer (dotted keys) equal the expected values."""
    if len(body) > JSON_BODY_MAX:
        return Outcome(False, f"{url} answered over {JSON_BODY_MAX} bytes; expected a small JSON object", ev)
    try:
        data = json.loads(body)
    except ValueError:
        excerpt = body[:BODY_EXCERPT].decode("utf-8", "replace").strip()
        ev["body"] = excerpt
        return Outcome(False, f"{url} answered HTTP {status} but not JSON: {excerpt[:80]}", ev)
    compared, bad = {}, []
    for key, value in want.items():
        got = dig(data, key)
        compared[key] = {"got": None if got is _MISSING else got, "want": value}
        if got is _MISSING or not _same(got, value):
            bad.append(f"{key} is {_show(got)}, expected {json.dumps(value)}")
    ev["compared"] = compared
    if bad:
        return Outcome(False, f"{url} answered, but " + "; ".join(bad), ev)
    summary = ", ".join(f"{k}={json.dumps(v['got'])}" for k, v in compared.items())
    return Outcome(True, f"{url} answered HTTP {status} with {summary}", ev)


def _url_label(a: dict[str, Any]) -> str:
    u = urlsplit(a["url"])
    return f"{u.netloc}{u.path}"


KINDS = (
    Kind("port_free", {"port": Field("port", required=True), "host": Field("text", default="127.0.0.1")},
         run_port_free, lambda a: str(a["port"]), scalar="port"),
    Kind("http_ok", {"url": Field("url", required=True), "status": Field("int", default=200),
                     "timeout": Field("timeout", default=3.0), "json": Field("mapping")},
         run_http_ok, _url_label, scalar="url", budget=lambda a: a["timeout"] + 2),
)
