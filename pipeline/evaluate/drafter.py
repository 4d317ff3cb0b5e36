"""The exported drafter folder as the speculative loop uses it: chain drafts with a KV cache.

Only the exported files are read (config.json + model.safetensors, through
pipeline.drafter.load_drafter) plus the target's embedding, which SGLang also takes from
the target: what is measured is what SGLang would serve, not the trainer's objects.

Row p of the drafter pairs token p+1 with the target's captured state at position p, at
position p. After each verification the cache is cut back to the rows built from target
states, and the rows of newly verified positions are added from the target's fresh states
(SGLang's draft extend); the chain's own rows are dropped, as SGLang drops them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import BadInput
from pipeline.jsonfile import read_json


def load_exported(folder: Path, target_dir: Path, capture: list[int], device: str, dtype: torch.dtype):
    from pipeline.drafter import DrafterConfigError, load_drafter
    from pipeline.drafter.target_head import TargetWeightsError, read_embeddings

    folder = Path(folder)
    cfg_path = folder / "config.json"
    raw = read_json(cfg_path, f"{cfg_path}: missing; --drafter must be a folder written by pipeline.export", BadInput)
    ids = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list) or [int(i) + 1 for i in ids] != list(capture):
        raise BadInput(f"{cfg_path}: eagle_aux_hidden_state_layer_ids is {ids!r}, but this target is captured at "
                       f"layers {capture} (ids {[c - 1 for c in capture]}); export with this target")
    try:
        model = load_drafter(folder)
        model.load_embeddings(read_embeddings(Path(target_dir)))
    except (DrafterConfigError, TargetWeightsError, ValueError, OSError) as e:
        raise BadInput(f"{folder}: {e}") from None
    return model.to(device=device, dtype=dtype).eval()


class ChainDrafter:
    """`propose(seq, aux, k)`: k greedy drafts following seq (see speculative.Proposer)."""

    def __init__(self, model) -> None:
        from pipeline.drafter import KVCache

        self.model = model
        self.device = model.fc.weight.device
        self._new_cache = KVCache
        self.cache = KVCache()
        self.rows = 0  # cached rows built from target states

    def reset(self) -> None:
        """Forget the cached rows: the next proposal is for another prompt."""
        self.cache = self._new_cache()
        self.rows = 0

    @torch.inference_mode()
    def propose(self, seq: list[int], aux: torch.Tensor, k: int) -> list[int]:
        n = len(seq)
        if aux.shape[0] != n - 1:
            raise ValueError(f"{aux.shape[0]} target states for {n} tokens; expected one per token but the last")
        if self.rows > n - 1:
            self.reset()
        self.cache.crop(self.rows)
        start = self.rows
        ids = torch.tensor([seq[start + 1 : n]], device=self.device)
        pos = torch.arange(start, n - 1, device=self.device)[None]
        hidden = aux[start : n - 1][None].to(device=self.device, dtype=self.model.fc.weight.dtype)
        logits, out = self.model(ids, hidden, pos, cache=self.cache)
        self.rows = n - 1
        drafts: list[int] = []
        for j in range(k):
            tok = self.model.draft_to_target(logits[0, -1].float().argmax())
            drafts.append(int(tok))
            if j == k - 1:
                break
            logits, out = self.model(tok.view(1, 1), out[:, -1:], torch.tensor([[n - 1 + j]], device=self.device),
                                     cache=self.cache)
        return drafts
