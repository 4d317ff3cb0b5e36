"""A stand-in for an extraction-mode SGLang server: the same HTTP (/health, /model_info,
/get_model_info, /generate with rid) and the same dump-folder protocol (/tmp/dump_protocol.md,
pipeline/patch/sglang_dump.py), without a model. SGLang cannot run on the test machines; this lets
the extraction client be tested end to end against a real socket and a real folder.

Hidden states are a deterministic function of the token ids (`states`), so a test can
compute what the store must hold. Dumps are written by the real hook's writer
(pipeline.patch.sglang_dump.DumpHook.dump): it waits for room in the byte budget, then gives up
with `<KEY>.error`, and never takes the folder over the budget (`max_occupancy` records the
most the folder held right after each write).

It also answers as a normal-mode server: `/v1/models` lists `served_model` (default the model
path, as SGLang does) and `/v1/chat/completions` answers with `answer(messages, seed,
max_tokens)`, a deterministic text of at most max_tokens words, so the regenerate tests know
what each record must hold. `chat_latency` slows each chat answer; `chat_inflight` /
`chat_max_inflight` count the chat requests answered at once; a user turn holding
`too_long_marker` gets HTTP 400 (context length), as SGLang answers a prompt past it, and one
holding `fail_marker` gets HTTP 503, a server's trouble the client retries. `reply`, a callable
(handler, the parsed request body) -> bool, may answer a POST itself (a hostile server: a
refusal, a drip, a lie); returning False leaves the request to the normal answer.

Fault knobs: `die_after` (answer N /generate or chat requests, then drop every connection and stop
listening), `corrupt` ({sample index: "truncate" | "nan" | "nan-last" | "ids"} on that
sample's first dump; "nan" is the first value of hidden_state, "nan-last" the last of
aux_hidden_state), `dump_delay` (the dump lands that many seconds after the answer), `latency` (seconds
before the prefill), `fast` (the bench: each length's states computed once, written with one
writev; same layout, budget and rename as the hook, but not its writer).

Run as a program it reads EAGLE3_DUMP_DIR / EAGLE3_DUMP_BUDGET / EAGLE3_DUMP_WAIT like the
real server and accepts `sglang.launch_server` flags (unknown ones are ignored):

    python tests/pipeline/standin_sglang.py --model-path M --host 127.0.0.1 --port 30000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import torch

from pipeline.atomic_io import write_bytes_atomic
from pipeline.dump_protocol import KEY_PREFIX, dump_room
from pipeline.patch.sglang_dump import DumpConfig, DumpHook, dump_bytes
from pipeline.target.config import read_config, text_config


def states(input_ids: list[int], hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden_state [T,H], aux_hidden_state [T,3H]) in bf16: what the stand-in 'computes'."""
    t = len(input_ids)
    ids = torch.tensor(input_ids, dtype=torch.float32)[:, None]
    pos = torch.arange(t, dtype=torch.float32)[:, None]
    col = torch.arange(4 * hidden, dtype=torch.float32)[None, :]
    x = torch.sin(ids * 0.37 + pos * 0.011 + col * 0.13).to(torch.bfloat16)
    return x[:, :hidden].contiguous(), x[:, hidden:].contiguous()


def answer(messages: list[dict], seed: int | None, max_tokens: int) -> tuple[str, int]:
    """The stand-in's chat answer and its token count (one token a word)."""
    key = hashlib.sha256(json.dumps([messages, seed], sort_keys=True).encode()).hexdigest()
    words = [f"w{key[i:i + 4]}" for i in range(0, 40, 4)]
    last = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
    words = [f"turn{sum(m.get('role') == 'user' for m in messages)}", *words, *str(last).split()[:3]]
    words = words[:max(1, max_tokens)]
    return " ".join(words), len(words)


def occupancy(folder: Path) -> int:
    total = 0
    with os.scandir(folder) as it:
        for e in it:
            try:
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def read_hidden(model_path: str) -> int:
    return int(text_config(read_config(model_path))["hidden_size"])


class StandIn:
    def __init__(self, model_path: str | Path, dump_dir: str | Path | None, hidden: int | None = None,
                 budget: int = 8 * 10**9, wait: float = 120.0, host: str = "127.0.0.1", port: int = 0,
                 die_after: int | None = None, corrupt: dict[int, str] | None = None, dump_delay: float = 0.0,
                 latency: float = 0.0, fast: bool = False, served_model: str | None = None,
                 chat_latency: float = 0.0, too_long_marker: str | None = None,
                 fail_marker: str | None = None, reply=None) -> None:
        self.model_path = str(model_path)
        self.served_model = served_model or self.model_path
        self.chat_latency, self.too_long_marker = chat_latency, too_long_marker
        self.fail_marker = fail_marker
        self.reply = reply
        self.chat_requests = 0
        self.chat_inflight = self.chat_max_inflight = 0
        self.dump_dir = Path(dump_dir) if dump_dir else None
        self.hidden = hidden if hidden is not None else read_hidden(self.model_path)
        self.budget, self.wait = budget, wait
        self.die_after, self.corrupt = die_after, dict(corrupt or {})
        self.dump_delay, self.latency, self.fast = dump_delay, latency, fast
        self.requests = 0
        self.per_key: dict[str, int] = {}
        self.dumps = 0
        self.errors = 0
        self.max_occupancy = 0
        self.inflight = self.max_inflight = 0  # /generate requests being answered at once
        self.running: set[str] = set()  # rids in flight: a second request with one gets HTTP 400
        self.dead = False
        self._lock = threading.Lock()
        self._fast_cache: dict[int, tuple[bytes, bytes]] = {}
        self._room = threading.Lock()
        self.hook = DumpHook(DumpConfig(self.dump_dir, budget, wait), poll=0.005) if self.dump_dir else None
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
        self.httpd = _Server((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="standin-sglang", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.dead = True
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if not self.dead:
            self.stop()

    def _die(self) -> None:
        self.dead = True
        threading.Thread(target=lambda: (self.httpd.shutdown(), self.httpd.server_close()), daemon=True).start()

    def tensors(self, input_ids: list[int]) -> dict[str, torch.Tensor]:
        final, aux = states(input_ids, self.hidden)
        return {"input_ids": torch.tensor(input_ids, dtype=torch.int64), "hidden_state": final,
                "aux_hidden_state": aux}

    def _fast_parts(self, t: int) -> tuple[bytes, bytes]:
        """The hidden and aux bytes of a T-token dump, computed once per length (bench)."""
        with self._lock:
            parts = self._fast_cache.get(t)
            if parts is None:
                final, aux = states([7] * t, self.hidden)
                parts = (final.view(torch.uint8).numpy().tobytes(), aux.view(torch.uint8).numpy().tobytes())
                self._fast_cache[t] = parts
        return parts

    def fast_write(self, rid: str, input_ids: list[int]) -> None:
        """The bench's writer: the same file layout, budget and atomic rename as the hook's,
        with the tensor bytes precomputed, so the server side costs one copy into /dev/shm."""
        assert self.hook is not None
        t, h = len(input_ids), self.hidden
        final, aux = self._fast_parts(t)
        ids = struct.pack(f"<{t}q", *input_ids)
        entries = {"__metadata__": {"rid": rid, "tokens": str(t)},
                   "input_ids": {"dtype": "I64", "shape": [t], "data_offsets": [0, 8 * t]},
                   "hidden_state": {"dtype": "BF16", "shape": [t, h], "data_offsets": [8 * t, 8 * t + len(final)]},
                   "aux_hidden_state": {"dtype": "BF16", "shape": [t, 3 * h],
                                        "data_offsets": [8 * t + len(final), 8 * t + len(final) + len(aux)]}}
        head = json.dumps(entries, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 8)
        parts = [struct.pack("<Q", len(head)), head, ids, final, aux]
        need = sum(len(x) for x in parts)
        folder = self.hook.config.dir
        deadline = time.monotonic() + self.wait
        while True:
            with self._room:
                if occupancy(folder) + need <= dump_room(self.budget):
                    tmp = folder / f".{rid}.safetensors.tmp"
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        os.writev(fd, parts)
                    finally:
                        os.close(fd)
                    os.rename(tmp, folder / f"{rid}.safetensors")
                    self.dumps += 1
                    return
            if time.monotonic() >= deadline:
                self.hook.refuse(rid, "no room in the dump budget (stand-in)")
                self.errors += 1
                return
            time.sleep(0.002)  # wait-ok: poll interval of a deadline loop

    def prefill(self, rid: str, input_ids: list[int]) -> None:
        """What the patched model does for one request during extend: pipeline.patch.sglang_dump's
        hook writes the dump (budget, lock, atomic rename, .error when there is no room)."""
        if self.hook is None or not rid.startswith(KEY_PREFIX):
            return
        if self.latency:
            time.sleep(self.latency)
        if self.fast:
            self.fast_write(rid, input_ids)
            return
        tensors = self.tensors(input_ids)
        index = int(rid.split("-")[1])
        with self._lock:
            fault = self.corrupt.pop(index, None)
        if fault == "nan":
            tensors["hidden_state"] = tensors["hidden_state"].clone()
            tensors["hidden_state"][0, 0] = float("nan")
        elif fault == "nan-last":
            tensors["aux_hidden_state"] = tensors["aux_hidden_state"].clone()
            tensors["aux_hidden_state"][-1, -1] = float("nan")
        elif fault == "ids":
            tensors["input_ids"] = tensors["input_ids"].flip(0).contiguous()
        if fault == "truncate":
            data = dump_bytes(tensors, {"rid": rid, "tokens": str(len(input_ids))})
            write_bytes_atomic(self.hook.config.dir / f"{rid}.safetensors", data[: len(data) // 2])
            return
        if self.dump_delay:
            threading.Thread(target=self._write_later, args=(rid, tensors), daemon=True).start()
        else:
            self.write(rid, tensors)

    def _write_later(self, rid: str, tensors: dict[str, torch.Tensor]) -> None:
        time.sleep(self.dump_delay)
        self.write(rid, tensors)

    def write(self, rid: str, tensors: dict[str, torch.Tensor]) -> None:
        assert self.hook is not None
        ok = self.hook.dump(rid, tensors["input_ids"], tensors["hidden_state"], tensors["aux_hidden_state"])
        with self._lock:
            if ok:
                self.dumps += 1
                self.max_occupancy = max(self.max_occupancy, occupancy(self.hook.config.dir))
            else:
                self.errors += 1


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a client opening dozens of connections at once (uvicorn's is 2048)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a killed client
            super().handle_error(request, client_address)


def _handler(standin: StandIn):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()  # no Nagle: headers and body go in two writes (uvicorn sets it too)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, status: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _dropped(self) -> bool:
            if standin.dead:
                self.close_connection = True
                return True
            return False

        def do_GET(self) -> None:
            if self._dropped():
                return
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": standin.served_model, "object": "model",
                                                              "owned_by": "sglang"}]})
            elif self.path in ("/model_info", "/get_model_info"):
                self._send(200, {"model_path": standin.model_path, "is_generation": True})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self._dropped():
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if standin.reply is not None and standin.reply(self, json.loads(raw)):
                return
            if self.path == "/v1/chat/completions":
                self._chat(raw)
                return
            if self.path != "/generate":
                self._send(404, {"detail": "Not Found"})
                return
            with standin._lock:
                standin.requests += 1
                if standin.die_after is not None and standin.requests > standin.die_after:
                    standin._die()
                    self.close_connection = True
                    return
            try:
                req = json.loads(raw)
                ids = [int(x) for x in req["input_ids"]]
                rid = str(req.get("rid") or "")
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, {"error": f"bad request: {e}"})
                return
            with standin._lock:
                duplicate = rid in standin.running
                if not duplicate:
                    standin.running.add(rid)
                    standin.per_key[rid] = standin.per_key.get(rid, 0) + 1
                    standin.inflight += 1
                    standin.max_inflight = max(standin.max_inflight, standin.inflight)
            if duplicate:  # as SGLang's tokenizer manager answers a rid still in flight
                self._send(400, {"error": {"message": f"Duplicate request ID detected: {rid}"}})
                return
            try:
                standin.prefill(rid, ids)
            finally:
                with standin._lock:
                    standin.inflight -= 1
                    standin.running.discard(rid)
            self._send(200, {"text": "", "output_ids": [0],
                             "meta_info": {"id": rid, "prompt_tokens": len(ids), "completion_tokens": 1}})

        def _chat(self, raw: bytes) -> None:
            with standin._lock:
                standin.requests += 1
                if standin.die_after is not None and standin.requests > standin.die_after:
                    standin._die()
                    self.close_connection = True
                    return
                standin.chat_requests += 1
                standin.chat_inflight += 1
                standin.chat_max_inflight = max(standin.chat_max_inflight, standin.chat_inflight)
            try:
                try:
                    req = json.loads(raw)
                    messages = list(req["messages"])
                    model = str(req["model"])
                    max_tokens = int(req.get("max_tokens") or 16)
                except (ValueError, KeyError, TypeError) as e:
                    self._send(400, {"object": "error", "message": f"bad request: {e}"})
                    return
                if model != standin.served_model:
                    self._send(404, {"object": "error", "message": f"The model `{model}` does not exist."})
                    return
                marker = standin.too_long_marker
                if marker and any(marker in str(m.get("content", "")) for m in messages):
                    self._send(400, {"object": "error", "message": "Requested token count exceeds the model's "
                                     "maximum context length"})
                    return
                if standin.fail_marker and any(standin.fail_marker in str(m.get("content", "")) for m in messages):
                    self._send(503, {"object": "error", "message": "Service Unavailable"})
                    return
                if standin.chat_latency:
                    time.sleep(standin.chat_latency)
                text, tokens = answer(messages, req.get("seed"), max_tokens)
                finish = "length" if tokens >= max_tokens else "stop"
                self._send(200, {"id": "chatcmpl-standin", "object": "chat.completion", "model": model,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                              "finish_reason": finish}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": tokens,
                                           "total_tokens": tokens + 1}})
            finally:
                with standin._lock:
                    standin.chat_inflight -= 1

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="stand-in for an extraction-mode sglang.launch_server")
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--fast", action="store_true", help="one precomputed block of values for every request (bench)")
    p.add_argument("--served-model-name", help="the name /v1/models lists (default the model path)")
    p.add_argument("--chat-latency", type=float, default=0.0, help="seconds before each chat answer")
    args, _unknown = p.parse_known_args(argv)
    dump = DumpConfig.from_env()
    standin = StandIn(args.model_path, dump.dir if dump else None, budget=dump.budget if dump else 1,
                      wait=dump.wait if dump else 0.0, host=args.host, port=args.port, fast=args.fast,
                      served_model=args.served_model_name, chat_latency=args.chat_latency)
    if args.port_file:
        tmp = Path(args.port_file).with_suffix(".tmp")
        tmp.write_text(str(standin.httpd.server_address[1]))
        tmp.rename(args.port_file)
    print(f"stand-in SGLang server on {standin.url} serving {standin.model_path}", flush=True)
    try:
        standin.httpd.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
