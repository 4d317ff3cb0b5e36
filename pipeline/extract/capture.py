"""The target's forward pass and what it hands to the writers.

Capture uses `output_hidden_states=True` on the base model (no hooks, no LM head: the
logits are the costliest tensor of a forward and extraction never needs them). In HF
terms `hidden_states[i]` is the input of decoder layer i, so the capture layers are plain
indices, and `last_hidden_state` is the final post-norm state.

Batches are right-padded and run without an attention mask: with causal attention no real
token ever attends to the padding after it, so the padding cannot change a real token's
state, and SDPA can take its fused causal kernel. Finiteness is checked on the device,
per sample over its real tokens, before the copy out. On CUDA the copy to pinned host
memory runs on a side stream while the next batch's forward runs on the main one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from .buffers import HostSlot
from .errors import BadInput, ExtractError


def load_target(model_dir: Path, device: str, dtype: torch.dtype) -> torch.nn.Module:
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    kwargs: dict = {"dtype": dtype, "attn_implementation": "sdpa"}
    on_gpu = device != "cpu"
    if on_gpu and importlib.util.find_spec("accelerate") is not None:
        kwargs["device_map"] = {"": device}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), **kwargs)
    except (OSError, ValueError, KeyError) as e:
        raise BadInput(f"cannot load the target from {model_dir} (--model): {str(e).splitlines()[0]}") from None
    if on_gpu and "device_map" not in kwargs:
        model.to(device)
    return model.eval()


class Capturer:
    def __init__(self, model: torch.nn.Module, layers: list[int], num_layers: int, device: str) -> None:
        self.base = model.base_model
        self.layers = layers
        self.num_layers = num_layers
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.side = torch.cuda.Stream(self.device) if self.cuda else None

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(final [B,T,H], aux [B,T,3H], bad [B]) on the device."""
        x = input_ids.to(self.device, non_blocking=True)
        out = self.base(input_ids=x, use_cache=False, output_hidden_states=True)
        hs = out.hidden_states
        if hs is None or len(hs) != self.num_layers + 1:
            got = "none" if hs is None else len(hs)
            raise ExtractError(
                f"the target returned {got} hidden states, expected {self.num_layers + 1} (layers + embeddings); "
                "this model class is not supported by the hf backend"
            )
        final = out.last_hidden_state
        aux = torch.cat([hs[i] for i in self.layers], dim=-1)
        t = x.shape[1]
        bad = (~torch.isfinite(final).all(-1)) | (~torch.isfinite(aux).all(-1))
        if min(lengths) < t:
            lens = torch.tensor(lengths)
            lens = (lens.pin_memory() if self.cuda else lens).to(self.device, non_blocking=True)
            bad &= torch.arange(t, device=self.device)[None, :] < lens[:, None]
        return final, aux, bad.any(-1)

    @torch.inference_mode()
    def to_host(self, final: torch.Tensor, aux: torch.Tensor, bad: torch.Tensor,
                slot: HostSlot) -> torch.cuda.Event | None:
        """Copy into the slot; returns the event that marks the copy done (None on CPU)."""
        b, t, _ = final.shape
        h_final, h_aux, h_bad = slot.views(b, t)
        if not self.cuda:
            h_final.copy_(final)
            h_aux.copy_(aux)
            h_bad.copy_(bad)
            return None
        assert self.side is not None
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            h_final.copy_(final, non_blocking=True)
            h_aux.copy_(aux, non_blocking=True)
            h_bad.copy_(bad, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.side)
        for x in (final, aux, bad):
            x.record_stream(self.side)
        return done
