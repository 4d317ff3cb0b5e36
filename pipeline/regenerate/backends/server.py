"""The server backend: `concurrency` worker threads per server, each taking a whole record and
asking its server for every turn in order (server_client.py), while the calling thread feeds
the work queue (never more than WINDOW_PER_WORKER records ahead of the oldest unwritten one, so
memory stays bounded when one record is slow) and hands finished records to the sink.

A record whose requests failed for the server's trouble, not the record's (refused, reset,
timed out, 5xx, 429, or anything but an answer: see server_client.py) becomes the record's
failure only once its server has answered another request since, or nothing else is in
flight. If the server dies first, the record is never committed: the sink writes nothing past
it, the run stops with exit 4, and the rerun asks it again in its place, so a resumed output is
in input order like an uninterrupted one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from pipeline.regenerate.backends.server_client import RECORD_FAULTS, Client, Sampling, Server, check_server
from pipeline.regenerate.conversation import Chat, checked, seed_for
from pipeline.regenerate.errors import Failure, PeerDead, RegenError
from pipeline.regenerate.sink import Sink

NAME = "regenerate"
WINDOW_PER_WORKER = 4
_POLL_S = 0.2

Pending = tuple[Chat, Failure, Server, int]  # a record failed for its server's trouble, and its answers then
Outcome = Chat | Pending | BaseException


class ServerBackend:
    def __init__(self, urls: tuple[str, ...], model: str, sampling: Sampling, *, timeout: float, retries: int,
                 max_consecutive: int, concurrency: int, seed: int) -> None:
        self.urls, self.model, self.sampling = urls, model, sampling
        self.timeout, self.retries, self.max_consecutive = timeout, retries, max_consecutive
        self.concurrency, self.seed = concurrency, seed

    def check(self) -> ServerBackend:
        """Every server answers and serves the model: one down (exit 4) or serving another model
        (exit 2) is refused before anything is written."""
        for url in self.urls:
            check_server(url, self.model)
        return self

    def run(self, chats: Iterator[Chat], sink: Sink[Chat]) -> None:
        servers = [Server(u, self.max_consecutive) for u in self.urls]
        stop = threading.Event()
        work: queue.Queue[Chat | None] = queue.Queue()
        results: queue.Queue[tuple[int, Outcome]] = queue.Queue()
        threads = [threading.Thread(target=self._worker, args=(s, work, results, stop), name=f"regen-{i}-{k}",
                                    daemon=True)
                   for i, s in enumerate(servers) for k in range(self.concurrency)]
        for t in threads:
            t.start()
        try:
            self._feed(chats, sink, work, results, WINDOW_PER_WORKER * len(threads))
        finally:
            stop.set()
            for _ in threads:
                work.put(None)
            sink.tick(force=True)
        for s in servers:
            print(f"{NAME}: {s.url}: at most {s.max_inflight} requests in flight", flush=True)

    def _worker(self, server: Server, work: queue.Queue[Chat | None], results: queue.Queue[tuple[int, Outcome]],
                stop: threading.Event) -> None:
        client = Client(server, self.model, self.sampling, self.timeout, self.retries, stop)
        try:
            while not stop.is_set():
                chat = work.get()
                if chat is None:
                    return
                try:
                    while not chat.done:
                        text, tokens = client.ask(chat.prompt(), seed_for(self.seed, chat.id, chat.turn))
                        chat.answer(*checked(text, tokens))
                    results.put((chat.index, chat))
                except Failure as f:
                    results.put((chat.index, (chat, f, server, server.answered)))
                except PeerDead as e:
                    results.put((chat.index, e))
                except BaseException as e:  # noqa: BLE001 - a bug in a worker ends the run, not the thread silently
                    results.put((chat.index, RegenError(f"{type(e).__name__}: {e}")))
        finally:
            client.close()

    @staticmethod
    def _feed(chats: Iterator[Chat], sink: Sink[Chat], work: queue.Queue[Chat | None],
              results: queue.Queue[tuple[int, Outcome]], window: int) -> None:
        """Keep the workers fed within the window and hand what they finish to the sink; raises
        what a worker raised (a server dead, a bug)."""
        fed = received = 0
        exhausted = False
        pending: dict[int, Pending] = {}
        while True:
            while not exhausted and fed - sink.next < window:
                chat = next(chats, None)
                if chat is None:
                    exhausted = True
                    break
                work.put(chat)
                fed += 1
            if exhausted and sink.next >= fed:
                return
            try:
                index, result = results.get(timeout=_POLL_S)
            except queue.Empty:
                sink.tick()
                continue
            if isinstance(result, BaseException):
                raise result
            received += 1
            if isinstance(result, tuple):
                if result[1].reason == "stopped":
                    continue
                if result[1].reason not in RECORD_FAULTS:
                    pending[index] = result
                else:
                    sink.put(index, result[:2])
            else:
                sink.put(index, result)
            for i, (chat, failure, server, answered) in sorted(pending.items()):
                if server.answered > answered or received == fed:
                    del pending[i]
                    sink.put(i, (chat, failure))
