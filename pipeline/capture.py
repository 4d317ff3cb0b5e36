"""The target's forward pass with the capture layers read out: what extraction hands to its
writers and what online training feeds its drafter, one mechanism for both.

Capture keeps only what the store needs: forward pre-hooks on the three capture layers copy
each one's input straight into its third of the `aux [B,T,3H]` buffer, and the base model's
`last_hidden_state` is the final post-norm state. `output_hidden_states=True` would keep
every layer's states alive to the end of the forward (about 4.4 GB at 16k tokens on an 8B
target, 21 GB on an 80-layer H=8192 one); the hooks hold none of them. No LM head either:
the logits are the costliest tensor of a forward and extraction never needs them.

A stop (SIGTERM) is checked before every decoder layer, so on a CPU, where one batch can
take minutes, `eagle3 stop` ends the forward within a layer's time rather than the batch's:
the batch in flight is dropped (`StoppedInForward`), what the writers already have is kept.

On CUDA each decoder layer's `forward` is compiled with torch.compile (on by default; off
with `compile=False`, the CLI's `--no-compile`). Only `forward` is replaced, so the module's
`__call__` still runs the pre-hooks eagerly, outside the compiled region. All layers share
one code object, so they share the compiled graph; a shape change recompiles once and then
goes dynamic. If compilation fails (no Triton, an unsupported op), the layers go back to
eager with one warning line, rather than the run failing. CPU runs stay eager by default.

Batches are right-padded and run without an attention mask: with causal attention no real
token ever attends to the padding after it, so the padding cannot change a real token's
state, and SDPA can take its fused causal kernel (flash: `pipeline/sdpa_choice.py` says why
not cuDNN's). Finiteness is checked on the device,
per sample over its real tokens, before the copy out. On CUDA the copy to pinned host
memory runs on a side stream while the next batch's forward runs on the main one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import torch

from pipeline.compiled_ops import compile_failed
from pipeline.events import warn
from pipeline.program_edge import StageError
from pipeline.sdpa_choice import leave_out_cudnn


class HostViews(Protocol):
    """Where a batch's states land on the host (extract's HostSlot)."""

    def views(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


class StoppedInForward(Exception):
    """The stop was set between two decoder layers of a forward: its batch is abandoned."""


def _allow_recompiles(n: int) -> None:
    """Room for every layer (and a dynamic-shape recompile) in dynamo's cache: past its
    limit (8 by default) a layer silently runs eager."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if isinstance(getattr(cfg, name, None), int) and getattr(cfg, name) < n:
            setattr(cfg, name, n)


class Capturer:
    def __init__(self, model: Any, layers: list[int], num_layers: int, device: str,
                 compile: bool | None = None, log: Callable[[str], None] = print,
                 compile_backend: str | Callable = "inductor", stop: threading.Event | None = None,
                 stage: str = "extract") -> None:
        self.base = model.base_model  # a transformers causal LM's (pipeline.target.model.load_target)
        self.layers = layers
        self.num_layers = num_layers
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        leave_out_cudnn()
        self.side = torch.cuda.Stream(self.device) if self.cuda else None
        self.log = log
        self.stage = stage
        blocks = getattr(self.base, "layers", None)
        if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) != num_layers:
            got = "none" if not isinstance(blocks, torch.nn.ModuleList) else len(blocks)
            raise StageError(
                f"the target's base model has {got} decoder layers in .layers, expected {num_layers}; "
                "this model class is not supported by the hf backend"
            )
        self.blocks = blocks
        self.hidden = self.base.get_input_embeddings().weight.shape[-1]
        self._aux: torch.Tensor | None = None
        self._fired = 0
        self._handles = [blocks[n].register_forward_pre_hook(self._capture_hook(k), with_kwargs=True)
                         for k, n in enumerate(layers)]
        self.stop = stop
        if stop is not None:
            self._handles += [block.register_forward_pre_hook(self._stop_hook) for block in blocks]
        self.compiled = False
        if compile if compile is not None else self.cuda:
            _allow_recompiles(4 * num_layers)
            for block in blocks:
                block.forward = torch.compile(block.forward, backend=compile_backend)
            self.compiled = True

    def _capture_hook(self, k: int) -> Callable[..., None]:
        def pre(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            h = args[0] if args else kwargs["hidden_states"]
            if self._aux is not None:
                width = h.shape[-1]
                self._aux[..., k * width:(k + 1) * width].copy_(h)
                self._fired += 1
        return pre

    def _stop_hook(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self.stop is not None and self.stop.is_set():
            raise StoppedInForward()

    def _uncompile(self) -> None:
        for block in self.blocks:
            block.__dict__.pop("forward", None)
        self.compiled = False

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._uncompile()

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(final [B,T,H], aux [B,T,3H], bad [B]) on the device."""
        x = input_ids.to(self.device, non_blocking=True)
        b, t = x.shape
        dtype = next(self.base.parameters()).dtype
        try:
            final = self._run(x, b, t, dtype)
        except (torch.cuda.OutOfMemoryError, StoppedInForward):
            self._aux = None
            raise
        except Exception as e:
            if not self.compiled:
                raise
            self._uncompile()
            warn(self.stage, compile_failed("the decoder layers", e, "--no-compile"), log=self.log)
            final = self._run(x, b, t, dtype)
        aux, self._aux = self._aux, None
        assert aux is not None
        bad = (~torch.isfinite(final).all(-1)) | (~torch.isfinite(aux).all(-1))
        if min(lengths) < t:
            lens = torch.tensor(lengths)
            lens = (lens.pin_memory() if self.cuda else lens).to(self.device, non_blocking=True)
            bad &= torch.arange(t, device=self.device)[None, :] < lens[:, None]
        return final, aux, bad.any(-1)

    def _run(self, x: torch.Tensor, b: int, t: int, dtype: torch.dtype) -> torch.Tensor:
        self._aux = torch.empty(b, t, 3 * self.hidden, dtype=dtype, device=self.device)
        self._fired = 0
        out = self.base(input_ids=x, use_cache=False)
        if self._fired != len(self.layers):
            self._aux = None
            raise StageError(
                f"the capture hooks saw {self._fired} of the {len(self.layers)} capture layers' inputs; "
                "this model class is not supported by the hf backend"
            )
        return out.last_hidden_state

    @torch.inference_mode()
    def to_host(self, final: torch.Tensor, aux: torch.Tensor, bad: torch.Tensor,
                slot: HostViews) -> torch.cuda.Event | None:
        """Copy into the slot (extract's HostSlot); returns the event that marks the copy done (None on CPU)."""
        b, t, _ = final.shape
        return self.copy_out(list(zip((final, aux, bad), slot.views(b, t))))

    @torch.inference_mode()
    def copy_out(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.cuda.Event | None:
        """Copy each device tensor into its host view; returns the event that marks the copies
        done (None on CPU). On CUDA they run on the side stream, after the work queued so far."""
        if not self.cuda:
            for src, dst in pairs:
                dst.copy_(src)
            return None
        assert self.side is not None
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            for src, dst in pairs:
                dst.copy_(src, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.side)
        for src, _dst in pairs:
            src.record_stream(self.side)
        return done
