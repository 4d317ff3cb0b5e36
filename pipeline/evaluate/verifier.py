"""The target as the verifier sees it: one forward gives the greedy next token at every
position, the three captured hidden states (the drafter's input) and nothing else.

Capture uses forward pre-hooks on the decoder layers [2, L//2, L-3] (pipeline.target.config), whose
inputs are what extraction stored (docs/internals.md, "Hidden-state store"), so the drafter
sees at evaluation exactly what it was trained on.

With the KV cache (the default) a forward runs only on the tokens the cache does not hold:
the cache keeps the keys and values, and the captured states, of the last sequence
scored; a call for a sequence that shares a prefix with it is cut back to that prefix
(DynamicCache.crop, so after a rejection only the accepted drafts stay) and extended by
the rest. Callers never see the cache: `step` takes the whole sequence and returns the
states of every position, as a full forward would. `kv_cache=False` runs every forward
on the whole sequence, the slow reference the cached path is checked against.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pipeline.evaluate.errors import BadInput
from pipeline.hf_cache import cache_kwarg
from pipeline.target.config import capture_layers
from pipeline.target.model import load_target
from pipeline.target.weights import FingerprintError, target_fingerprint

if TYPE_CHECKING:
    from pipeline.evaluate.tree import Tree


@dataclass(frozen=True)
class TargetStep:
    next_ids: torch.Tensor  # [keep] greedy token after each of the last `keep` positions
    aux: torch.Tensor  # [T, 3H] inputs of the capture layers, every position


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
    def __init__(self, model_dir: Path, device: str, dtype: torch.dtype, kv_cache: bool = True) -> None:
        self.model = load_target(Path(model_dir), device, dtype, "--target")
        self.device = torch.device(device)
        self.model_dir = Path(model_dir)
        self._fingerprint: str | None = None
        layers = self.model.base_model.layers
        self.num_layers = len(layers)
        self.capture = capture_layers(self.num_layers)
        self.hidden_size = int(self.model.config.hidden_size)
        self.vocab_size = int(self.model.config.vocab_size)
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)
        self.eos = eos_ids(self.model)
        self.kv_cache = kv_cache
        self.cache_kw = cache_kwarg(self.model)
        self.positions_run = 0  # token positions the target has computed, over all forwards
        self._seen: dict[int, torch.Tensor] = {}
        self._cache: Any = None  # a transformers DynamicCache once a step runs
        self._ids: list[int] = []  # the tokens whose keys, values and states are cached
        self._aux: torch.Tensor | None = None  # [capacity, 3H]; rows < len(self._ids) are valid
        # what the last verify_tree computed, until commit keeps its accepted path
        self._pending: tuple[int, list[int], torch.Tensor, list[int]] | None = None
        for i in self.capture:
            layers[i].register_forward_pre_hook(self._hook(i), with_kwargs=True)

    @property
    def fingerprint(self) -> str:
        """The weights' fingerprint (pipeline.target.weights): what kept greedy references are keyed by."""
        if self._fingerprint is None:
            try:
                self._fingerprint = target_fingerprint(self.model_dir)
            except FingerprintError as e:
                raise BadInput(f"--target {self.model_dir}: {e}") from None
        return self._fingerprint

    def _hook(self, index: int) -> Callable[..., None]:
        def grab(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self._seen[index] = args[0] if args else kwargs["hidden_states"]

        return grab

    def forget(self) -> None:
        """Drop the cache (its memory too); the next step starts from nothing."""
        self._cache, self._ids, self._aux = None, [], None

    @torch.inference_mode()
    def step(self, ids: list[int], keep: int) -> TargetStep:
        """Forward over `ids`; the greedy choice after each of the last `keep` positions.
        With the cache the returned `aux` is a view valid until the next call."""
        if not 1 <= keep <= len(ids):
            raise ValueError(f"keep={keep} for a sequence of {len(ids)} tokens")
        if not self.kv_cache:
            logits, aux = self._forward(ids, None, keep)
            return TargetStep(next_ids=logits.float().argmax(-1).cpu(), aux=aux)
        from transformers import DynamicCache

        reuse = min(len(os.path.commonprefix([self._ids, ids])), len(ids) - keep)
        if reuse == 0 or self._cache is None:
            self._cache, self._ids, reuse = DynamicCache(config=self.model.config), [], 0
        elif self._cache.get_seq_length() > reuse:
            self._cache.crop(reuse - self._cache.get_seq_length())
        logits, aux = self._forward(ids[reuse:], self._cache, keep)
        stored = self._store_aux(reuse, aux)
        self._ids = list(ids)
        return TargetStep(next_ids=logits.float().argmax(-1).cpu(), aux=stored[: len(ids)])

    @torch.inference_mode()
    def verify_tree(self, seq: list[int], tree: Tree) -> torch.Tensor:
        """One forward over `seq` and the drafts of `tree` (its root is seq[-1]) under the tree
        mask: every draft sees the sequence and its own ancestors, at position
        len(seq) - 1 + depth. Returns the greedy token after the root and after each draft
        [D]; `commit` then keeps the accepted path."""
        reuse = min(len(os.path.commonprefix([self._ids, seq])), len(seq) - 1) if self.kv_cache and self._cache is not None else 0
        if self.kv_cache:
            from transformers import DynamicCache

            if reuse == 0 or self._cache is None:
                self._cache, self._ids, reuse = DynamicCache(config=self.model.config), [], 0
            elif self._cache.get_seq_length() > reuse:
                self._cache.crop(reuse - self._cache.get_seq_length())
        tail, drafts = seq[reuse:], tree.tokens[1:]
        q = len(tail) + len(drafts)
        allowed = torch.ones(q, reuse + q, dtype=torch.bool).tril(diagonal=reuse)
        allowed[len(tail):, reuse + len(tail):] = tree.ancestors()[1:, 1:]
        mask = torch.zeros(allowed.shape, dtype=self.model.dtype).masked_fill_(~allowed, torch.finfo(self.model.dtype).min)
        depth = torch.tensor(tree.depth[1:], dtype=torch.long)
        pos = torch.cat((torch.arange(reuse, len(seq)), len(seq) - 1 + depth))
        logits, aux = self._forward(tail + drafts, self._cache if self.kv_cache else None, len(tree.tokens),
                                    attention_mask=mask[None, None].to(self.device), position_ids=pos[None].to(self.device))
        self._pending = (reuse, list(seq), aux, list(tree.tokens))
        return logits.float().argmax(-1).cpu()

    @torch.inference_mode()
    def commit(self, path: list[int]) -> torch.Tensor:
        """Keep the accepted tree nodes `path` (after the last `verify_tree`): the cache holds
        the sequence plus that path, as if the path had been decoded one token at a time.
        Returns the captured states of every committed position."""
        if self._pending is None:
            raise ValueError("commit without a verify_tree before it")
        reuse, seq, aux, tokens = self._pending
        self._pending = None
        end = len(seq) - reuse  # rows of the tail; tree node i >= 1 is row end - 1 + i
        rows = torch.tensor(list(range(end)) + [end - 1 + i for i in path], device=aux.device)
        if self.kv_cache:
            keep = torch.cat((torch.arange(reuse, device=aux.device), reuse + rows))
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys.index_select(-2, keep), layer.values.index_select(-2, keep)
            stored = self._store_aux(reuse, aux.index_select(0, rows))
            self._ids = seq + [tokens[i] for i in path]
            return stored[: len(self._ids)]
        return aux.index_select(0, rows)

    def _forward(self, ids: list[int], cache: Any, keep: int, **extra: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        self._seen.clear()
        try:
            held = cache.get_seq_length() if cache is not None else 0
            out = self.model(input_ids=x, use_cache=cache is not None, logits_to_keep=keep, **{self.cache_kw: cache},
                             **extra)
            if cache is not None and cache.get_seq_length() != held + len(ids):
                raise RuntimeError(f"the target's forward did not extend its KV cache under '{self.cache_kw}' "
                                   f"(it holds {cache.get_seq_length()} positions, expected {held + len(ids)}); "
                                   "rerun with --no-kv-cache")
            aux = torch.cat([self._seen[i][0] for i in self.capture], dim=-1)
        finally:
            self._seen.clear()
        self.positions_run += len(ids)
        return out.logits[0], aux

    def _store_aux(self, at: int, rows: torch.Tensor) -> torch.Tensor:
        """Rows `at`.. of the captured states, and the buffer that holds them; it doubles as it
        fills, so a long answer copies its states O(log n) times, not once per token."""
        need = at + rows.shape[0]
        if self._aux is None or self._aux.shape[0] < need:
            grown = torch.empty((max(need, 2 * (0 if self._aux is None else self._aux.shape[0]), 64), rows.shape[1]),
                                dtype=rows.dtype, device=rows.device)
            if self._aux is not None and at:
                grown[:at] = self._aux[:at]
            self._aux = grown
        self._aux[at:need] = rows
        return self._aux
