"""The target as the verifier sees it: one forward gives the greedy next token at every
position, the three captured hidden states (the drafter's input) and nothing else.

Capture uses forward pre-hooks on the decoder layers [2, L//2, L-3], whose inputs are
what extraction stored (DESIGN.md section 2), so the drafter sees at evaluation exactly
what it was trained on. Every forward runs on the whole sequence without a KV cache:
verification and the plain greedy reference then take the same path, so their outputs
can be compared token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.extract.errors import ExtractError
from pipeline.extract.meta import capture_layers

from .errors import BadInput
from pipeline.jsonfile import read_json


@dataclass(frozen=True)
class TargetStep:
    next_ids: torch.Tensor  # [keep] greedy token after each of the last `keep` positions
    aux: torch.Tensor  # [T, 3H] inputs of the capture layers, every position


def read_config(model_dir: Path) -> dict:
    path = Path(model_dir) / "config.json"
    cfg = read_json(path, f"target {model_dir} has no config.json (--target); point it at a save_pretrained folder",
                    BadInput)
    return cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg


def eos_ids(model: torch.nn.Module) -> set[int]:
    ids: set[int] = set()
    for cfg in (getattr(model, "generation_config", None), model.config):
        eos = getattr(cfg, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    return ids


class Target:
    def __init__(self, model_dir: Path, device: str, dtype: torch.dtype) -> None:
        from pipeline.extract.capture import load_target

        try:
            self.model = load_target(Path(model_dir), device, dtype)
        except ExtractError as e:
            raise BadInput(str(e).replace("--model", "--target")) from None
        self.device = torch.device(device)
        layers = self.model.base_model.layers
        self.num_layers = len(layers)
        try:
            self.capture = capture_layers(self.num_layers)
        except ExtractError as e:
            raise BadInput(str(e)) from None
        self.hidden_size = int(self.model.config.hidden_size)
        self.vocab_size = int(self.model.config.vocab_size)
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)
        self.eos = eos_ids(self.model)
        self._seen: dict[int, torch.Tensor] = {}
        for i in self.capture:
            layers[i].register_forward_pre_hook(self._hook(i), with_kwargs=True)

    def _hook(self, index: int):
        def grab(_module, args, kwargs):
            self._seen[index] = args[0] if args else kwargs["hidden_states"]

        return grab

    @torch.inference_mode()
    def step(self, ids: list[int], keep: int) -> TargetStep:
        """Forward over `ids`; the greedy choice after each of the last `keep` positions."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        self._seen.clear()
        logits = self.model(input_ids=x, use_cache=False, logits_to_keep=keep).logits[0]
        aux = torch.cat([self._seen[i][0] for i in self.capture], dim=-1)
        self._seen.clear()
        return TargetStep(next_ids=logits.float().argmax(-1).cpu(), aux=aux)
