"""Answers from SGLang (or any OpenAI-compatible) servers: `POST /v1/chat/completions`.

Each server gets its own `concurrency` worker threads and keep-alive connections, so the
requests in flight on one server never exceed the bound. A request that fails on the way
(refused, reset, timed out, HTTP 5xx or 429) is retried with exponential backoff; one the
server answers with another 4xx is the record's failure, not the server's. A server whose
requests fail `max_consecutive_failures` times in a row is dead: the run stops with exit 4
naming it, keeping everything written, and the same command resumes once it is back.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import BadInput, Failure, PeerDead

MAX_BODY = 16 * 1024 * 1024  # bytes of one answer; past it the request fails as bad_response
CHECK_TIMEOUT = 10.0
BACKOFF_START = 0.5
BACKOFF_CAP = 8.0
RETRIED = ("connection", "timeout", "http_5xx", "http_429")


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float
    top_p: float


class _Conn:
    """One keep-alive connection to one server, reopened after any failure."""

    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url)
        self.url, self.timeout = url, timeout
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname or "127.0.0.1", u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self._c: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._c is not None:
            self._c.close()
            self._c = None

    def request(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> tuple[int, bytes]:
        """(status, body); raises Failure('connection'|'timeout'|'bad_response', ...)."""
        limit = timeout or self.timeout
        deadline = time.monotonic() + limit
        if self._c is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self._c = cls(self.host, self.port, timeout=limit)
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            self._c.timeout = limit
            if self._c.sock is not None:
                self._c.sock.settimeout(limit)
            self._c.request(method, self.prefix + path, body=data, headers=headers)
            resp = self._c.getresponse()
            chunks, size = [], 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                if self._c.sock is not None:
                    self._c.sock.settimeout(left)
                chunk = resp.read(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BODY:
                    self.close()
                    raise Failure("bad_response", f"{self.url}{path}: answer larger than {MAX_BODY} bytes")
                chunks.append(chunk)
            if resp.will_close:
                self.close()
            return resp.status, b"".join(chunks)
        except (TimeoutError, socket.timeout):
            self.close()
            raise Failure("timeout", f"{self.url}{path}: no complete answer within {limit:g} s (--timeout)") from None
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Failure("connection", f"{self.url}{path}: {type(e).__name__}: {e}".rstrip(": ")) from None


def _models(body: bytes) -> list[str]:
    try:
        data = json.loads(body)["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (ValueError, KeyError, TypeError):
        return []


def check_server(url: str, served_model: str) -> None:
    """At start: the server answers /health and lists the configured target in /v1/models."""
    conn = _Conn(url, CHECK_TIMEOUT)
    try:
        try:
            status, _ = conn.request("GET", "/health")
        except Failure as f:
            raise PeerDead(f"server {url} is not answering ({f.detail}); start it (or fix --server) and rerun") from None
        if status != 200:
            raise PeerDead(f"server {url}/health answered HTTP {status}; it is not ready; wait for it and rerun")
        try:
            status, body = conn.request("GET", "/v1/models")
        except Failure as f:
            raise PeerDead(f"server {url}/v1/models: {f.detail}; rerun when it answers") from None
        names = _models(body) if status == 200 else []
        if status != 200:
            raise BadInput(f"server {url}/v1/models answered HTTP {status}; it is not an OpenAI-compatible server")
        if served_model not in names:
            raise BadInput(f"server {url} serves {', '.join(map(repr, names)) or 'no model'}, not {served_model!r} "
                           "(--served-model, or --model as SGLang lists it); start it with the target, or fix the flag")
    finally:
        conn.close()


class Server:
    """One server's shared state: its consecutive-failure count and, once dead, why."""

    def __init__(self, url: str, max_consecutive: int) -> None:
        self.url, self.max_consecutive = url, max_consecutive
        self._lock = threading.Lock()
        self.consecutive = 0
        self.answered = 0
        self.dead: str | None = None
        self.inflight = self.max_inflight = 0

    def ok(self) -> None:
        with self._lock:
            self.consecutive = 0
            self.answered += 1

    def failed(self, detail: str) -> None:
        with self._lock:
            self.consecutive += 1
            if self.consecutive >= self.max_consecutive and self.dead is None:
                self.dead = (f"server {self.url} failed {self.consecutive} requests in a row (last: {detail}); "
                             "the records written so far are kept; restart it and rerun the same command to resume")

    def check_alive(self) -> None:
        if self.dead is not None:
            raise PeerDead(self.dead)


def _classify(status: int, body: bytes, url: str) -> Failure:
    text = body[:300].decode("utf-8", "replace").replace("\n", " ")
    if status == 429:
        return Failure("http_429", f"{url}: HTTP 429 (busy): {text}")
    if status >= 500:
        return Failure("http_5xx", f"{url}: HTTP {status}: {text}")
    low = text.lower()
    if status == 400 and ("context" in low or "too long" in low or "maximum" in low or "exceed" in low):
        return Failure("prompt_too_long", f"{url}: HTTP 400: {text}")
    return Failure(f"http_{status}", f"{url}: HTTP {status}: {text}")


def _answer(body: bytes, url: str) -> tuple[str, int, str]:
    try:
        obj = json.loads(body)
        choice = obj["choices"][0]
        text = choice["message"]["content"]
        finish = str(choice.get("finish_reason") or "")
        usage = obj.get("usage") or {}
        tokens = int(usage.get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError):
        raise Failure("bad_response", f"{url}: not a chat completion: {body[:200]!r}") from None
    if not isinstance(text, str):
        raise Failure("bad_response", f"{url}: message content is {type(text).__name__}, not text")
    return text, tokens, finish


class Client:
    """One worker thread's way to ask one server, with its own connection."""

    def __init__(self, server: Server, model: str, sampling: Sampling, timeout: float, retries: int,
                 stop: threading.Event) -> None:
        self.server, self.model, self.sampling = server, model, sampling
        self.retries, self.stop = retries, stop
        self.conn = _Conn(server.url, timeout)

    def ask(self, messages: list[dict[str, str]], seed: int) -> tuple[str, int]:
        body = {"model": self.model, "messages": messages, "max_tokens": self.sampling.max_new_tokens,
                "temperature": self.sampling.temperature, "top_p": self.sampling.top_p, "seed": seed,
                "stream": False}
        delay = BACKOFF_START
        for attempt in range(self.retries + 1):
            self.server.check_alive()
            if self.stop.is_set():
                raise Failure("stopped", "the run is stopping")
            try:
                with self.server._lock:
                    self.server.inflight += 1
                    self.server.max_inflight = max(self.server.max_inflight, self.server.inflight)
                try:
                    status, raw = self.conn.request("POST", "/v1/chat/completions", body)
                finally:
                    with self.server._lock:
                        self.server.inflight -= 1
                if status == 200:
                    text, tokens, _finish = _answer(raw, self.server.url)
                    self.server.ok()
                    return text, tokens
                failure = _classify(status, raw, self.server.url)
            except Failure as f:
                failure = f
            if failure.reason not in RETRIED:
                self.server.ok()  # it answered: alive, the record is the problem
                raise failure
            self.server.failed(failure.detail)
            if attempt == self.retries:
                raise failure
            if self.stop.wait(min(delay, BACKOFF_CAP)):
                raise Failure("stopped", "the run is stopping")
            delay *= 2
        raise failure  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        self.conn.close()
