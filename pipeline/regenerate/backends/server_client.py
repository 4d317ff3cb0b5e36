"""How the server backend (server.py) asks SGLang, or any OpenAI-compatible server, for an
answer: `POST /v1/chat/completions`.

Each server gets its own `concurrency` worker threads and keep-alive connections, so the
requests in flight on one server never exceed the bound. Requests go through
`pipeline.http_client`: `--timeout` is a deadline for the whole request, a body cut short is a
dropped connection. A request that fails on the way (refused, reset, cut short, timed out,
HTTP 5xx or 429) is retried with exponential backoff. Only an answer is "alive": a chat
completion whose text is UTF-8 within `--max-new-tokens` worth of bytes, from the model asked
for, with a sane usage count. Anything else the server says (200 with an error, bad JSON,
another shape, another model, a 404, a redirect) is a failed request that counts toward the
server's death, like a dropped one, and the record's failure; only a prompt the server refuses
as too long is the record's own trouble. A server whose requests fail
`max_consecutive_failures` times in a row is dead: the run stops with exit 4 naming it,
keeping everything written, and the same command resumes once it is back.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from pipeline.http_client import TIMEOUT, TOO_LARGE, Connection, HttpFailure
from pipeline.regenerate.errors import BadInput, Failure, PeerDead

MAX_BODY = 16 * 1024 * 1024  # bytes of one HTTP answer, whatever --max-new-tokens allows
MAX_BYTES_PER_TOKEN = 64  # an answer's UTF-8 bytes per --max-new-tokens token: far past any vocabulary's mean
JSON_ESCAPE = 6  # bytes a JSON string may spend on one byte of text (\u00XX)
BODY_SLACK = 64 * 1024  # the rest of a chat completion around its text
CHECK_TIMEOUT = 10.0
CHECK_BODY = 1 << 20
BACKOFF_START = 0.5
BACKOFF_CAP = 8.0
RETRIED = ("connection", "timeout", "http_5xx", "http_429")
RECORD_FAULTS = ("prompt_too_long", "empty_answer")  # the server answered; the record is the problem


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float
    top_p: float

    @property
    def max_text_bytes(self) -> int:
        return self.max_new_tokens * MAX_BYTES_PER_TOKEN

    @property
    def max_body(self) -> int:
        return min(MAX_BODY, self.max_text_bytes * JSON_ESCAPE + BODY_SLACK)


def _request(conn: Connection, method: str, path: str, body: dict | None, timeout: float,
             max_bytes: int) -> tuple[int, bytes]:
    """(status, body); raises Failure('connection'|'timeout'|'answer_too_long', ...)."""
    try:
        ans = conn.request(method, path, body, timeout, max_bytes)
    except HttpFailure as f:
        reason = {TIMEOUT: "timeout", TOO_LARGE: "answer_too_long"}.get(f.kind, "connection")
        raise Failure(reason, f.detail) from None
    return ans.status, ans.body


def _models(body: bytes) -> list[str]:
    try:
        data = json.loads(body)["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (ValueError, KeyError, TypeError, RecursionError):
        return []


def check_server(url: str, served_model: str) -> None:
    """At start: the server answers /health and lists the configured target in /v1/models."""
    conn = Connection(url)
    try:
        try:
            status, _ = _request(conn, "GET", "/health", None, CHECK_TIMEOUT, CHECK_BODY)
        except Failure as f:
            raise PeerDead(f"server {url} is not answering ({f.detail}); start it (or fix --server) and rerun") from None
        if status != 200:
            raise PeerDead(f"server {url}/health answered HTTP {status}; it is not ready; wait for it and rerun")
        try:
            status, body = _request(conn, "GET", "/v1/models", None, CHECK_TIMEOUT, CHECK_BODY)
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


def _bad(url: str, what: str) -> Failure:
    return Failure("bad_response", f"{url}: {what}")


def _tokens(usage: object, url: str, most: int) -> int:
    """completion_tokens, 0 when the server leaves usage out; a usage no server means is a failure."""
    if usage is None:
        return 0
    if not isinstance(usage, dict):
        raise _bad(url, f"usage is {json.dumps(usage)[:60]}, not an object")
    n = usage.get("completion_tokens")
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= most:
        raise _bad(url, f"usage.completion_tokens is {str(n)[:60]}, not a count of 0..{most} (--max-new-tokens)")
    return n


def _answer(body: bytes, url: str, model: str, sampling: Sampling) -> tuple[str, int]:
    """The answer's text and token count, or the Failure that says what the server sent instead."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        raise _bad(url, f"answered HTTP 200 with no JSON: {body[:120]!r}") from None
    if isinstance(obj, dict) and "error" in obj and "choices" not in obj:
        raise _bad(url, f"answered HTTP 200 with an error: {str(obj['error'])[:200]}")
    choices = obj.get("choices") if isinstance(obj, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise _bad(url, f"not a chat completion (no text at choices[0].message.content): {body[:120]!r}")
    named = obj.get("model")
    if named is not None and named != model:
        raise Failure("wrong_model", f"{url}: answered as model {str(named)[:100]!r}, not {model!r} (--served-model)")
    tokens = _tokens(obj.get("usage"), url, sampling.max_new_tokens)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise Failure("bad_text", f"{url}: the answer holds a lone surrogate (\\ud800-\\udfff): not UTF-8 text, "
                      "no file can hold it") from None
    if size > sampling.max_text_bytes:
        raise Failure("answer_too_long", f"{url}: an answer of {size} bytes, more than {sampling.max_text_bytes} "
                      f"(--max-new-tokens {sampling.max_new_tokens} x {MAX_BYTES_PER_TOKEN} bytes)")
    return text, tokens


class Client:
    """One worker thread's way to ask one server, with its own connection."""

    def __init__(self, server: Server, model: str, sampling: Sampling, timeout: float, retries: int,
                 stop: threading.Event) -> None:
        self.server, self.model, self.sampling = server, model, sampling
        self.timeout, self.retries, self.stop = timeout, retries, stop
        self.conn = Connection(server.url)

    def _once(self, body: dict) -> tuple[str, int]:
        with self.server._lock:
            self.server.inflight += 1
            self.server.max_inflight = max(self.server.max_inflight, self.server.inflight)
        try:
            status, raw = _request(self.conn, "POST", "/v1/chat/completions", body, self.timeout,
                                   self.sampling.max_body)
        finally:
            with self.server._lock:
                self.server.inflight -= 1
        if status != 200:
            raise _classify(status, raw, self.server.url)
        return _answer(raw, self.server.url, self.model, self.sampling)

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
                answer = self._once(body)
                self.server.ok()
                return answer
            except Failure as f:
                failure = f
            if failure.reason in RECORD_FAULTS:
                self.server.ok()  # it answered: alive, the record is the problem
                raise failure
            self.server.failed(failure.detail)  # anything but an answer is not a sign of life
            if failure.reason not in RETRIED or attempt == self.retries:
                raise failure
            if self.stop.wait(min(delay, BACKOFF_CAP)):
                raise Failure("stopped", "the run is stopping")
            delay *= 2
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def close(self) -> None:
        self.conn.close()
