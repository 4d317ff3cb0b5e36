"""The one HTTP client of the stages that ask a server (regenerate's server backend,
`evaluate --server`): a keep-alive connection whose timeout is a deadline for the whole
request, and a body that is whole or a failure.

A socket timeout bounds each `recv`, so a server that sends one byte a second (headers, a
body, chunks) holds such a client for ever. Here every request registers its socket with one
watchdog thread, which shuts the socket down at the deadline; whatever the reader was waiting
for then ends, and the request fails as `timeout`. A body longer than the caller's bound, or
shorter than its Content-Length (a connection cut mid-answer), fails too; redirects are not
followed (a server that moved is a failed request, never a silent second server).

Stdlib only: a stage that talks HTTP needs nothing else.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

# What a failed request was: the caller decides which are retried.
CONNECTION = "connection"  # refused, reset, cut short: nothing usable arrived
TIMEOUT = "timeout"  # no complete answer before the deadline
TOO_LARGE = "too_large"  # more bytes than the caller's bound
_READ = 1 << 16


class HttpFailure(Exception):
    """A request that got no complete answer; `kind` is CONNECTION, TIMEOUT or TOO_LARGE."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: http.client.HTTPMessage


class _Watch:
    __slots__ = ("sock", "fired", "done")

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock, self.fired, self.done = sock, False, False


class _Watchdog:
    """One thread for the process: shuts down each watched socket at its deadline."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._seq = itertools.count()
        self._live = 0
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket | None, deadline: float) -> _Watch:
        w = _Watch(sock)
        with self._cv:
            heapq.heappush(self._heap, (deadline, next(self._seq), w))
            self._live += 1
            if len(self._heap) > 64 and len(self._heap) > 4 * self._live:  # drop finished requests' entries
                self._heap = [e for e in self._heap if not e[2].done]
                heapq.heapify(self._heap)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadline", daemon=True)
                self._thread.start()
            self._cv.notify()
        return w

    def rearm(self, w: _Watch, sock: socket.socket | None) -> None:
        with self._cv:
            w.sock = sock

    def release(self, w: _Watch) -> bool:
        """Stop watching; whether the deadline had already fired (after this it never does)."""
        with self._cv:
            if not w.done:
                w.done = True
                self._live -= 1
            return w.fired

    def _run(self) -> None:
        with self._cv:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][2].done or self._heap[0][0] <= now):
                    _, _, w = heapq.heappop(self._heap)
                    if not w.done:
                        w.fired = True
                        if w.sock is not None:
                            try:
                                w.sock.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass
                self._cv.wait(self._heap[0][0] - now if self._heap else None)


_WATCHDOG = _Watchdog()


class Connection:
    """One keep-alive connection to one server, reopened after any failure. Not thread-safe:
    one per worker thread."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.url = url.rstrip("/")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname or "127.0.0.1", u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self._c: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._c is not None:
            self._c.close()
            self._c = None

    def request(self, method: str, path: str, body: object | None, timeout: float, max_bytes: int) -> Answer:
        """The whole answer within `timeout` seconds, at most `max_bytes` of body; else HttpFailure."""
        where = f"{self.url}{path}"
        deadline = time.monotonic() + timeout
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self._c is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self._c = cls(self.host, self.port, timeout=timeout)
        self._c.timeout = timeout
        watch = _WATCHDOG.watch(self._c.sock, deadline)
        try:
            if self._c.sock is None:
                self._c.connect()
                _WATCHDOG.rearm(watch, self._c.sock)
                if watch.fired:
                    raise TimeoutError
            self._c.sock.settimeout(timeout)
            self._c.request(method, self.prefix + path, body=data, headers=headers)
            resp = self._c.getresponse()
            raw = _read_body(resp, where, max_bytes)
            if _WATCHDOG.release(watch):
                raise TimeoutError
            if resp.will_close:
                self.close()
            return Answer(resp.status, raw, resp.headers)
        except HttpFailure as f:
            _WATCHDOG.release(watch)  # before the close: the watchdog never shuts a socket that is gone
            self.close()
            if watch.fired:
                raise HttpFailure(TIMEOUT, f"{where}: no complete answer within {timeout:g} s (--timeout)") from None
            raise f from None
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            _WATCHDOG.release(watch)
            self.close()
            if watch.fired or isinstance(e, (TimeoutError, socket.timeout)):
                raise HttpFailure(TIMEOUT, f"{where}: no complete answer within {timeout:g} s (--timeout)") from None
            raise HttpFailure(CONNECTION, f"{where}: {type(e).__name__}: {e}".rstrip(": ")) from None
        finally:
            _WATCHDOG.release(watch)


def _read_body(resp: http.client.HTTPResponse, where: str, max_bytes: int) -> bytes:
    chunks, size = [], 0
    while chunk := resp.read(_READ):
        size += len(chunk)
        if size > max_bytes:
            raise HttpFailure(TOO_LARGE, f"{where}: answer larger than {max_bytes} bytes")
        chunks.append(chunk)
    length = resp.getheader("Content-Length")
    if length is not None and resp.getheader("Transfer-Encoding") is None and length.isdigit() \
            and size < int(length):
        raise HttpFailure(CONNECTION, f"{where}: body cut short: {size} of the {length} bytes announced")
    return b"".join(chunks)


def post_json(url: str, body: object, timeout: float, max_bytes: int) -> Answer:
    """One POST on a fresh connection (a caller without a worker of its own)."""
    u = urlsplit(url)
    conn = Connection(f"{u.scheme}://{u.netloc}")
    try:
        return conn.request("POST", u.path or "/", body, timeout, max_bytes)
    finally:
        conn.close()
