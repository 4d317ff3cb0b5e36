"""The few SGLang HTTP calls extraction makes, on the standard library only.

One keep-alive connection per thread (http.client is not thread-safe, and a new TCP
connection per request would cost more than a 1-token answer). No proxy is ever used: the
server is local, and a cluster's http_proxy must not swallow the requests.
"""

from __future__ import annotations

import http.client
import json
import threading
from urllib.parse import urlsplit

MAX_ANSWER_BYTES = 1 << 20


class ServerError(Exception):
    """A request that failed: connection, timeout, HTTP status or an unreadable answer.
    `silent` is True when the server sent nothing back before the timeout (hung or
    overloaded), which the client reports apart from a server that answers wrongly."""

    def __init__(self, message: str, silent: bool = False) -> None:
        super().__init__(message)
        self.silent = silent


class SGLangServer:
    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url if "://" in url else f"http://{url}")
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"{url!r} is not an http://HOST:PORT URL")
        self.url = f"http://{u.netloc}"
        self.host, self.port = u.hostname, u.port or 80
        self.base = u.path.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            conn = self._conn()
            conn.request(method, self.base + path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read(MAX_ANSWER_BYTES + 1)
            if resp.will_close or len(payload) > MAX_ANSWER_BYTES:
                self._drop()
            return resp.status, payload[:MAX_ANSWER_BYTES]
        except TimeoutError:
            self._drop()
            raise ServerError(f"{self.url}{path}: no answer within {self.timeout:g} s", silent=True) from None
        except ConnectionRefusedError:
            self._drop()
            raise ServerError(f"{self.url}{path}: connection refused (is the server running?)") from None
        except (OSError, http.client.HTTPException) as e:
            self._drop()
            raise ServerError(f"{self.url}{path}: {type(e).__name__}: {e}") from None

    def get_json(self, path: str) -> dict:
        status, payload = self.request("GET", path)
        if status != 200:
            raise ServerError(f"{self.url}{path} answered HTTP {status}: {_excerpt(payload)}")
        try:
            obj = json.loads(payload)
        except ValueError:
            raise ServerError(f"{self.url}{path} answered something that is not JSON: {_excerpt(payload)}") from None
        if not isinstance(obj, dict):
            raise ServerError(f"{self.url}{path} answered JSON that is not an object")
        return obj

    def model_path(self) -> str:
        """The model path the server reports (/model_info; /get_model_info on older SGLang)."""
        try:
            info = self.get_json("/model_info")
        except ServerError as e:
            if "HTTP 404" not in str(e):
                raise
            info = self.get_json("/get_model_info")
        path = info.get("model_path")
        if not isinstance(path, str):
            raise ServerError(f"{self.url}/model_info has no model_path: {_excerpt(json.dumps(info).encode())}")
        return path

    def generate(self, input_ids: list[int], rid: str) -> None:
        """Prefill `input_ids` under request id `rid` (one new token, greedy)."""
        body = {"input_ids": input_ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0}, "rid": rid}
        status, payload = self.request("POST", "/generate", body)
        if status != 200:
            raise ServerError(f"{self.url}/generate answered HTTP {status}: {_excerpt(payload)}")

    def close(self) -> None:
        self._drop()


def _excerpt(payload: bytes, n: int = 160) -> str:
    text = payload.decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:n] + ("…" if len(text) > n else "") if text else "(empty body)"
