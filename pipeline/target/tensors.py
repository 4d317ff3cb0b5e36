"""The target's tensors read one at a time from its safetensors: its token embedding and
lm_head.

The drafter needs only these two matrices of the target (the embedding is frozen inside the
drafter; the head turns stored final hidden states into the target's distribution). Loading
the whole target for them would cost its full size in memory (hundreds of GB for large
targets); `safe_open` reads just the named tensor from the right shard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.target import config as target_config
from pipeline.target import weights as target_weights

SINGLE = "model.safetensors"
EMBED_SUFFIX = "embed_tokens.weight"
HEAD_SUFFIX = "lm_head.weight"


class TargetWeightsError(target_config.TargetError):
    """The target folder lacks a tensor or file; str() names it and what to do."""


def weight_map(target: Path) -> dict[str, str]:
    """Tensor name -> shard file name, from the index (pipeline.target.weight_map) or the
    single file's header."""
    target = Path(target)
    wm = target_weights.weight_map(target)
    if wm is not None:
        return wm
    single = target / SINGLE
    if not single.exists():
        raise TargetWeightsError(f"{target}: neither {target_weights.INDEX} nor {SINGLE}; --target must hold "
                                 "safetensors weights")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return dict.fromkeys(f.keys(), SINGLE)


def _find(names: dict[str, str], suffix: str) -> str | None:
    matches = sorted((n for n in names if n == suffix or n.endswith("." + suffix)), key=lambda n: (len(n), n))
    # a multimodal target can also hold a vision tower's embed_tokens; the language model's has the shortest name
    return matches[0] if matches else None


def _tied(cfg: dict) -> bool:
    inner = target_config.text_config(cfg)
    return bool(cfg.get("tie_word_embeddings", inner.get("tie_word_embeddings", False)))


def tensor_names(target: Path) -> tuple[str, str]:
    """(embedding name, head name); the head is the embedding for tied targets."""
    names = weight_map(target)
    embed = _find(names, EMBED_SUFFIX)
    if embed is None:
        raise TargetWeightsError(f"{target}: no tensor named *{EMBED_SUFFIX} in its safetensors")
    head = _find(names, HEAD_SUFFIX)
    if head is None:
        if not _tied(target_config.read_config(target, "--target")):
            raise TargetWeightsError(
                f"{target}: no *{HEAD_SUFFIX} tensor and config.json does not set tie_word_embeddings")
        head = embed
    return embed, head


def read_tensor(target: Path, name: str) -> Any:
    """One tensor, as stored (dtype kept), without touching the rest of the checkpoint."""
    from safetensors import safe_open

    target = Path(target)
    shard = weight_map(target).get(name)
    if shard is None:
        raise TargetWeightsError(f"{target}: no tensor {name!r}")
    path = target / shard
    if not path.exists():
        raise TargetWeightsError(f"{path}: missing (named by {target_weights.INDEX} for {name!r})")
    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor(name)


def read_embeddings(target: Path) -> Any:
    """[vocab, hidden] token embedding of the target."""
    return read_tensor(target, tensor_names(target)[0])


def read_lm_head(target: Path) -> Any:
    """[vocab, hidden] output head of the target (the embedding when tied)."""
    return read_tensor(target, tensor_names(target)[1])
