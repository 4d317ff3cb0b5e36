"""Where answers come from. A `Backend` answers every user turn of the chats it is given and
hands each finished record, or the failure that ended it, to a sink (pipeline/regenerate/sink.py):
`hf.py` runs the target itself (slots decoding together on one device), `server.py` asks SGLang
or any OpenAI-compatible server. The stage opens the one the options name before anything is
written (the target loaded, every server checked), so a backend refused leaves no output
behind; then it only calls `run`. Another backend is one more module here and its opener in
OPENERS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from pipeline import cpu_threads
from pipeline.regenerate.backends.server import ServerBackend
from pipeline.regenerate.backends.server_client import Sampling
from pipeline.regenerate.conversation import Chat
from pipeline.regenerate.sink import Sink

if TYPE_CHECKING:
    from pipeline.regenerate.options import Options

NAME = "regenerate"


class Backend(Protocol):
    def run(self, chats: Iterator[Chat], sink: Sink[Chat]) -> None:
        """Answer every turn of every chat, in any order, handing each record to `sink` once;
        a record is admitted only a bounded window past `sink.next`, so memory stays bounded
        when one record is slow."""


def _hf(o: Options) -> Backend:
    cpu_threads.fit(NAME, o.threads)
    from pipeline.regenerate.backends.hf import HFBackend  # torch and transformers: only once there is work

    assert o.model is not None  # options: --backend hf needs --model
    return HFBackend(o.model, o.device, o.dtype, o.max_new_tokens, o.temperature, o.top_p, o.max_prompt_tokens,
                     o.trim_loops, seed=o.seed, slots=o.batch_size)


def _server(o: Options) -> Backend:
    assert o.served_model is not None  # options: --backend server needs --served-model or --model
    return ServerBackend(o.servers, o.served_model, Sampling(o.max_new_tokens, o.temperature, o.top_p),
                         timeout=o.timeout, retries=o.retries, max_consecutive=o.max_consecutive_failures,
                         concurrency=o.concurrency, seed=o.seed).check()


OPENERS: dict[str, Callable[[Options], Backend]] = {"hf": _hf, "server": _server}


def open_backend(o: Options) -> Backend:
    """The backend `--backend` names, ready to run."""
    return OPENERS[o.backend](o)
