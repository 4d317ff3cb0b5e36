"""The server side of the SGLang hidden-state dump: what the patched model calls during
prefill (recipes.py holds the few lines the patch injects into SGLang's model files).

Why a module of ours and not code in SGLang's file: the injected text stays a handful of lines
that the patcher can verify and revert byte for byte, and all the logic here runs (and is
tested) on CPU without SGLang.

How it is wired (SGLang 0.5.23; docs/sglang.md has the file:line references):
- The patched `__init__` of the CausalLM calls `attach(self)` when EAGLE3_DUMP_DIR is set.
  `attach` refuses server settings that would make dumps partial or wrong (chunked prefill,
  pipeline parallelism, attention data parallelism, two-batch overlap, LayerNorm sequence
  parallelism), calls the model's own `set_eagle3_layers_to_capture()` with no ids, which
  in both llama.py and deepseek_v2.py means the inputs of decoder layers [2, L//2, L-3]
  (the ids are offset differently by the two files only when ids are passed), checks that
  the model now captures exactly those, and returns a `DumpHook`.
- The patched `forward` calls the hook with the ForwardBatch, the final hidden state and the
  aux states, right where SGLang unpacks `hidden_states, aux_hidden_states` and before the
  logits processor. The final state there is post-norm in both files (the model's forward ends
  with `residual_batch.final_norm(..., self.norm)`). The aux states come as SGLang captures
  them: a list of K [N,H] tensors (llama.py, AuxHiddenStateList) or one packed [N,K*H]
  tensor (deepseek_v2.py, AuxHiddenStatePacker), layers in ascending order either way.

Protocol with the client (names, key format and room rules: pipeline/dump_protocol.py, which
both sides import; pipeline/extract/dumps.py is the client):
- Only extend (prefill) batches are looked at, and only requests whose rid starts with "e3-"
  (the client's KEY, `e3-<index>-<16 hex of sha256(int64 LE ids)>`).
- Per request: `<dir>/<KEY>.safetensors` holding `input_ids [T] int64`, `hidden_state [T,H]`,
  `aux_hidden_state [T,3H]` in the model dtype, metadata {"rid": KEY, "tokens": "T"},
  written as `<dir>/.<KEY>.safetensors.tmp` and renamed.
- A request that cannot be dumped whole gets `<dir>/<KEY>.error` instead, one line: a
  prefix-cache hit (extend_prefix_len > 0, whose prefix states were never computed), no room in
  the budget after waiting, a batch whose tensors do not have the shapes the batch says.
  A KEY that already has a dump never gets an .error.
- Environment: EAGLE3_DUMP_DIR (absent or empty: nothing happens), EAGLE3_DUMP_BUDGET (bytes the
  folder may hold, "8GB" style, default 8GB), EAGLE3_DUMP_WAIT (seconds to wait for room,
  default 120; keep it well below SGLang's --watchdog-timeout, 300 s by default, which kills a
  server whose forward takes longer).

Decisions the protocol left to this side:
- Budget: the folder's size is every plain file in it (dumps, temp files, .error files). A dump
  is serialized first, so its exact size is known; it is written only when the folder plus the
  dump fits the budget less the protocol's ERROR_ROOM (4 KB kept for .error files), checked and
  written under an flock on `<dir>/.eagle3-dump.lock`, so several writing processes (data-parallel replicas)
  never overshoot together. An .error is written even when that room is used up (the client
  deletes each one it reads). A dump larger than the whole budget gets an .error at once.
- Tensor parallelism: every TP rank runs the hook, only TP rank 0 writes (SGLang's
  `get_parallel().tp_rank`, read once at attach; without SGLang, torch.distributed's rank).
  Hidden states are replicated across TP ranks, so rank 0 has the whole batch.
- The write happens inside the forward, after a device-to-host copy of the request's rows; a
  full folder therefore stalls the server (the other ranks wait in their next collective),
  which is the intended back-pressure.
- Prefill CUDA graphs would replay without running this Python: the hook ignores batches seen
  while a CUDA stream is capturing and logs once that such a server must run with
  `--cuda-graph-backend-prefill disabled`.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import logging
import os
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from pipeline import dump_protocol as protocol
from pipeline.atomic_io import write_bytes_atomic
from pipeline.sizes import format_bytes, parse_size
from pipeline.target.config import capture_layers

ENV_DIR = "EAGLE3_DUMP_DIR"
ENV_BUDGET = "EAGLE3_DUMP_BUDGET"
ENV_WAIT = "EAGLE3_DUMP_WAIT"
DEFAULT_BUDGET = 8 * 10**9
DEFAULT_WAIT = 120.0
MAX_WAIT = 3600.0
POLL_SECONDS = 0.05
NUM_CAPTURES = 3

log = logging.getLogger("eagle3.sglang_dump")


class DumpConfigError(ValueError):
    """A dump setting the server cannot run with; str() names the variable and the fix."""


@dataclass(frozen=True)
class DumpConfig:
    dir: Path
    budget: int = DEFAULT_BUDGET
    wait: float = DEFAULT_WAIT

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DumpConfig | None:
        """The settings from the environment; None when EAGLE3_DUMP_DIR is absent or empty."""
        env = os.environ if env is None else env
        folder = env.get(ENV_DIR, "").strip()
        if not folder:
            return None
        budget = DEFAULT_BUDGET
        if env.get(ENV_BUDGET, "").strip():
            try:
                budget = parse_size(env[ENV_BUDGET])
            except ValueError as e:
                raise DumpConfigError(f"{ENV_BUDGET}={env[ENV_BUDGET]!r}: {e}") from None
            if budget <= 0:
                raise DumpConfigError(f"{ENV_BUDGET}={env[ENV_BUDGET]!r}: the budget must be more than 0 bytes")
        wait = DEFAULT_WAIT
        if env.get(ENV_WAIT, "").strip():
            try:
                wait = float(env[ENV_WAIT])
            except ValueError:
                raise DumpConfigError(f"{ENV_WAIT}={env[ENV_WAIT]!r} is not a number of seconds") from None
            if not 0 <= wait <= MAX_WAIT:
                raise DumpConfigError(f"{ENV_WAIT}={env[ENV_WAIT]!r}: give 0 to {MAX_WAIT:g} seconds")
        path = Path(folder)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DumpConfigError(f"{ENV_DIR}={folder}: cannot create the dump folder: {e.strerror or e}") from None
        if not os.access(path, os.W_OK):
            raise DumpConfigError(f"{ENV_DIR}={folder}: the dump folder is not writable by this server")
        return cls(path, budget, wait)


def pack_aux(aux: Any) -> torch.Tensor | None:
    """SGLang's aux capture as one [N, K*H] tensor (a packed tensor stays as it is)."""
    if aux is None:
        return None
    if isinstance(aux, torch.Tensor):
        return aux
    parts = list(aux)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _as_list(cpu: Any, gpu: Any) -> list[int] | None:
    """A per-request length list from the batch's CPU list, or its device tensor."""
    if cpu is not None:
        return [int(x) for x in cpu]
    if gpu is not None:
        return [int(x) for x in gpu.tolist()]
    return None


def _mode_is(mode: Any, name: str) -> bool:
    probe = getattr(mode, name, None)
    return bool(probe()) if callable(probe) else False


_SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64"}


def dump_parts(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> tuple[bytes, list[memoryview]]:
    """A dump's safetensors header and its tensors' raw bytes (CPU, contiguous). The file is
    written from the tensors' own memory: the server's forward waits on this write, and a
    serialised copy of a 470 MB dump costs it a few tenths of a second more."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    buffers, offset = [], 0
    for name, x in tensors.items():
        n = x.numel() * x.element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[x.dtype], "shape": list(x.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
        buffers.append(x.reshape(-1).view(torch.uint8).numpy().data)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-(len(js) + 8) % 8)
    return struct.pack("<Q", len(js)) + js, buffers


def dump_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """The whole dump file as bytes (the stand-in server's fault injection cuts it)."""
    head, buffers = dump_parts(tensors, metadata)
    return b"".join([head, *(bytes(b) for b in buffers)])


class DumpHook:
    """Called by the patched forward with each batch; writes the dumps of e3- requests."""

    def __init__(self, config: DumpConfig, *, rank: int = 0, layers: Sequence[int] | None = None,
                 poll: float = POLL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.rank = rank
        self.layers = list(layers) if layers is not None else None
        self.poll = poll
        self.clock = clock
        self.sleep = sleep
        self.written = 0
        self.errors = 0
        self._warned_capture = False

    # -- the batch -------------------------------------------------------------------------

    def __call__(self, forward_batch: Any, hidden_states: torch.Tensor, aux_hidden_states: Any) -> None:
        if self.rank != 0:
            return
        mode = getattr(forward_batch, "forward_mode", None)
        if not _mode_is(mode, "is_extend") or _mode_is(mode, "is_target_verify") or _mode_is(mode, "is_idle"):
            return
        rids = list(getattr(forward_batch, "rids", None) or [])
        if not any(protocol.is_ours(r) for r in rids):
            return
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            if not self._warned_capture:
                log.error("EAGLE3 dump: an extend batch is being captured into a CUDA graph; its replays "
                          "skip the dump hook. Start the server with --cuda-graph-backend-prefill disabled.")
                self._warned_capture = True
            return
        keys = [r if protocol.is_ours(r) else None for r in rids]
        why = None
        lens = _as_list(getattr(forward_batch, "extend_seq_lens_cpu", None),
                        getattr(forward_batch, "extend_seq_lens", None))
        prefix = _as_list(getattr(forward_batch, "extend_prefix_lens_cpu", None),
                          getattr(forward_batch, "extend_prefix_lens", None))
        input_ids = getattr(forward_batch, "input_ids", None)
        aux = pack_aux(aux_hidden_states)
        if lens is None or prefix is None or len(lens) != len(rids) or len(prefix) != len(rids):
            why = (f"the batch has {len(rids)} requests but extend lengths {lens} and prefix lengths {prefix} "
                   "(an SGLang version this hook does not know?)")
        elif aux is None:
            why = ("the model captured no aux hidden states: was set_eagle3_layers_to_capture reset, "
                   "or the patch applied to a model class that does not capture?")
        else:
            why = self._shape_problem(sum(lens), hidden_states, aux, input_ids)
        if why is not None or lens is None or prefix is None or aux is None or input_ids is None:
            for key in keys:
                if key is not None:
                    self.refuse(key, why or "")
            return
        offset = 0
        for key, n, pre in zip(keys, lens, prefix):
            start, offset = offset, offset + n
            if key is None:
                continue
            if pre > 0:
                self.refuse(key, f"prefix cache hit of {pre} tokens (only {n} of {pre + n} tokens were "
                                 "computed): start the server with --disable-radix-cache")
                continue
            rows = slice(start, start + n)
            try:
                self.dump(key, input_ids[rows], hidden_states[rows], aux[rows])
            except Exception as e:  # one request's failure must not kill a loaded server
                log.exception("EAGLE3 dump: %s failed", key)
                self.refuse(key, f"the dump failed in the server: {type(e).__name__}: {e}")

    def _shape_problem(self, tokens: int, hidden: torch.Tensor, aux: torch.Tensor,
                       input_ids: torch.Tensor | None) -> str | None:
        if hidden.dim() != 2 or hidden.shape[0] != tokens:
            return (f"the final hidden state has shape {tuple(hidden.shape)} for a batch of {tokens} tokens "
                    "(sequence-parallel or data-parallel attention layout?): serve with plain tensor parallelism")
        if aux.dim() != 2 or aux.shape[0] != tokens or aux.shape[1] != NUM_CAPTURES * hidden.shape[1]:
            return (f"the aux hidden states have shape {tuple(aux.shape)}, expected ({tokens}, "
                    f"{NUM_CAPTURES * hidden.shape[1]}) for {NUM_CAPTURES} capture layers")
        if input_ids is None or input_ids.dim() != 1 or input_ids.shape[0] != tokens:
            shape = None if input_ids is None else tuple(input_ids.shape)
            return f"the batch's input_ids have shape {shape} for a batch of {tokens} tokens"
        return None

    # -- one request -----------------------------------------------------------------------

    def dump(self, key: str, input_ids: torch.Tensor, hidden: torch.Tensor, aux: torch.Tensor) -> bool:
        """Write one request's dump, waiting for room; an .error instead when there is none."""
        tokens = int(input_ids.shape[0])
        tensors = {
            "input_ids": input_ids.detach().to("cpu", torch.int64).contiguous(),
            "hidden_state": hidden.detach().to("cpu").contiguous(),
            "aux_hidden_state": aux.detach().to("cpu").contiguous(),
        }
        head, buffers = dump_parts(tensors, {"rid": key, "tokens": str(tokens)})
        need = len(head) + sum(b.nbytes for b in buffers)
        budget = self.config.budget
        room = protocol.dump_room(budget)
        if need > room:
            self.refuse(key, f"the dump of {tokens} tokens takes {format_bytes(need)}, more than the whole "
                             f"budget {format_bytes(budget)}: raise {ENV_BUDGET}")
            return False
        deadline = self.clock() + self.config.wait
        why = ""
        while True:
            with self._locked():
                used = self.folder_bytes()
                if used + need <= room:
                    try:
                        write_bytes_atomic(self.config.dir / protocol.dump_name(key), [head, *buffers])
                    except OSError as e:
                        why = f"cannot write the dump into {self.config.dir}: {e.strerror or e}"
                        break
                    self.written += 1
                    return True
            if self.clock() >= deadline:
                why = (f"no room in the dump folder after {self.config.wait:g} s: it holds {format_bytes(used)} "
                       f"of its {format_bytes(budget)} budget and this dump needs {format_bytes(need)} "
                       "(is the client moving dumps into the store?)")
                break
            self.sleep(self.poll)
        self.refuse(key, why)
        return False

    def refuse(self, key: str, reason: str) -> None:
        """`<KEY>.error` with one line of reason, unless the key already has a dump."""
        if (self.config.dir / protocol.dump_name(key)).exists():
            log.warning("EAGLE3 dump: %s already has a dump; not writing an error (%s)", key, reason)
            return
        line = " ".join(reason.split())[: protocol.ERROR_LINE_CHARS]
        self.errors += 1
        log.warning("EAGLE3 dump: %s: %s", key, line)
        try:
            write_bytes_atomic(self.config.dir / protocol.error_name(key), (line + "\n").encode())
        except OSError as e:
            log.error("EAGLE3 dump: cannot write %s in %s: %s", protocol.error_name(key), self.config.dir, e)

    def folder_bytes(self) -> int:
        total = 0
        try:
            with os.scandir(self.config.dir) as it:
                for entry in it:
                    try:
                        if entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue  # deleted by the client while we looked
        except FileNotFoundError:
            pass
        return total

    def _locked(self) -> _FolderLock:
        return _FolderLock(self.config.dir / protocol.LOCK_NAME)


class _FolderLock:
    """flock on the folder's lock file: one writer at a time checks the budget and writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the lock


# -- the model side: what the patched __init__ calls --------------------------------------------


def server_problems(args: Any) -> list[str]:
    """Server settings under which dumps would be partial or wrong (attributes named as
    SGLang's settings; one that is absent is not checked)."""
    problems = []
    chunk = getattr(args, "chunked_prefill_size", None)
    if isinstance(chunk, int) and chunk > 0:
        problems.append(f"chunked prefill is on (--chunked-prefill-size {chunk}): a request that does not fit "
                        "what is left of a batch is split, and its first chunk would be dumped as if whole; "
                        "start the server with --chunked-prefill-size -1")
    pp = getattr(args, "pp_size", 1)
    if isinstance(pp, int) and pp > 1:
        problems.append(f"pipeline parallelism (--pp-size {pp}): the capture layers live on other ranks; use --tp-size")
    attn_dp = getattr(args, "attn_dp_size", None)
    if isinstance(attn_dp, int) and attn_dp > 1 or getattr(args, "enable_dp_attention", False) is True:
        problems.append("data-parallel attention: requests are spread over ranks that do not write; "
                        "serve with plain tensor parallelism")
    if getattr(args, "enable_two_batch_overlap", False) is True:
        problems.append("--enable-two-batch-overlap: layers past the dense ones skip the aux capture")
    if getattr(args, "enable_layernorm_sp", False) is True:
        problems.append("--enable-layernorm-sp: the final hidden states are sequence-sharded at the hook")
    return problems


# Where SGLang 0.5.23 keeps each resolved setting at run time (runtime_context.py). The raw
# ServerArgs record keeps what the operator typed, not the defaults resolution filled in
# (chunked_prefill_size None there may mean 8192 here), so the bags are what to read.
_SETTINGS = {
    "chunked_prefill_size": ("get_schedule", None),
    "pp_size": ("get_parallel", None),
    "attn_dp_size": ("get_parallel", None),
    "enable_dp_attention": ("get_parallel", None),
    "enable_layernorm_sp": ("get_parallel", None),
    "enable_two_batch_overlap": ("get_exec", "overlap"),
    "disable_radix_cache": ("get_memory", None),
}


def _sglang_settings() -> Any:
    """The resolved settings `server_problems` reads, from SGLang's runtime context; None
    outside an SGLang server. A setting this version does not have is left out."""
    try:
        runtime_context = importlib.import_module("sglang.srt.runtime_context")
    except Exception:  # noqa: BLE001  (not inside an SGLang server)
        return None
    found = {}
    for name, (getter, sub) in _SETTINGS.items():
        try:
            bag = getattr(runtime_context, getter)()
            found[name] = getattr(getattr(bag, sub) if sub else bag, name)
        except Exception:  # noqa: BLE001, S112  (a version without it: not checked)
            continue
    return SimpleNamespace(**found)


def _tp_rank() -> int:
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().tp_rank)
    except Exception:  # noqa: BLE001, S110  (not inside an SGLang server: torch.distributed decides)
        pass
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def attach(model: Any, env: Mapping[str, str] | None = None, server_args: Any = None,
           rank: int | None = None) -> DumpHook | None:
    """Make `model` (an SGLang CausalLM) capture the EAGLE-3 layers and return the hook its
    forward calls; None when EAGLE3_DUMP_DIR is not set. Raises RuntimeError, which stops the
    server at startup, on settings that would produce wrong dumps."""
    config = DumpConfig.from_env(env)
    if config is None:
        return None
    args = server_args if server_args is not None else _sglang_settings()
    problems = server_problems(args) if args is not None else []
    if problems:
        raise RuntimeError(f"{ENV_DIR} is set (hidden-state dump) but this server cannot dump whole requests: "
                           + "; ".join(problems))
    if args is not None and getattr(args, "disable_radix_cache", True) is not True:
        log.warning("EAGLE3 dump: the radix cache is on; requests that hit it get an .error "
                    "(start the server with --disable-radix-cache)")
    setter = getattr(model, "set_eagle3_layers_to_capture", None)
    if not callable(setter):
        raise TypeError(f"{ENV_DIR} is set but {type(model).__name__} has no set_eagle3_layers_to_capture")
    setter()
    layers = None
    num_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    inner = getattr(model, "model", None)
    captured = getattr(inner, "layers_to_capture", None)
    if isinstance(num_layers, int) and captured is not None and getattr(model, "capture_aux_hidden_states", True):
        layers = capture_layers(num_layers)
        if list(captured) != layers:
            raise RuntimeError(f"{type(model).__name__} captures layers {list(captured)} after "
                               f"set_eagle3_layers_to_capture(), expected {layers} for {num_layers} layers")
    hook = DumpHook(config, rank=_tp_rank() if rank is None else rank, layers=layers)
    if hook.rank == 0:
        log.info("EAGLE3 dump: prefill hidden states of e3-* requests go to %s (budget %s, wait %g s), "
                 "capture layers %s", config.dir, format_bytes(config.budget), config.wait, layers)
    return hook
