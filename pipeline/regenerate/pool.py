"""The server backend's workers: `concurrency` threads per server, each taking a whole
record and asking its server for every turn in order, while the main thread feeds the work
queue (never more than WINDOW_PER_WORKER records ahead of the oldest unwritten one, so
memory stays bounded when one record is slow) and hands finished records to the sink.

A record whose requests failed for the server's trouble, not the record's (refused, reset,
timed out, 5xx, 429, or anything but an answer: see backends/server.py) becomes the record's failure only once its server has answered
another request since, or nothing else is in flight. If the server dies first, the record is
never committed: the sink writes nothing past it, the run stops with exit 4, and the rerun asks
it again in its place, so a resumed output is in input order like an uninterrupted one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from .backends.server import RECORD_FAULTS, Client, Sampling, Server
from .conversation import Chat, checked, seed_for
from .errors import Failure, PeerDead, RegenError
from .sink import Sink

WINDOW_PER_WORKER = 4
_POLL_S = 0.2


def run(chats: Iterator[Chat], sink: Sink, urls: tuple[str, ...], model: str, sampling: Sampling, timeout: float,
        retries: int, max_consecutive: int, concurrency: int, seed: int) -> list[Server]:
    servers = [Server(u, max_consecutive) for u in urls]
    stop = threading.Event()
    work: queue.Queue[Chat | None] = queue.Queue()
    results: queue.Queue[tuple[int, object]] = queue.Queue()

    def worker(server: Server) -> None:
        client = Client(server, model, sampling, timeout, retries, stop)
        try:
            while not stop.is_set():
                chat = work.get()
                if chat is None:
                    return
                try:
                    while not chat.done:
                        text, tokens = client.ask(chat.prompt(), seed_for(seed, chat.id, chat.turn))
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

    threads = [threading.Thread(target=worker, args=(s,), name=f"regen-{i}-{k}", daemon=True)
               for i, s in enumerate(servers) for k in range(concurrency)]
    window = WINDOW_PER_WORKER * len(threads)
    for t in threads:
        t.start()
    fed = received = 0
    exhausted = False
    error: BaseException | None = None
    pending: dict[int, tuple] = {}  # index -> (chat, failure, server, its answers when it failed)
    try:
        while True:
            while not exhausted and fed - sink.next < window:
                chat = next(chats, None)
                if chat is None:
                    exhausted = True
                    break
                work.put(chat)
                fed += 1
            if exhausted and sink.next >= fed:
                break
            try:
                index, result = results.get(timeout=_POLL_S)
            except queue.Empty:
                sink.tick()
                continue
            if isinstance(result, BaseException):
                error = result
                break
            received += 1
            if isinstance(result, tuple) and result[1].reason == "stopped":
                continue
            if isinstance(result, tuple) and result[1].reason not in RECORD_FAULTS:
                pending[index] = result
            else:
                sink.put(index, result if isinstance(result, Chat) else result[:2])  # type: ignore[arg-type]
            for i, (chat, failure, server, answered) in sorted(pending.items()):
                if server.answered > answered or received == fed:
                    del pending[i]
                    sink.put(i, (chat, failure))
    finally:
        stop.set()
        for _ in threads:
            work.put(None)
        sink.tick(force=True)
    if error is not None:
        raise error
    return servers
