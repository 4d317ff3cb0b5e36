"""The EAGLE-3 drafter: its config (SGLang's config.json), model (SGLang's weight names), draft
vocabulary (d2t/t2d) and the target tensors it borrows. See model.py's docstring for the API.

The model and the vocabulary load torch, so they are imported when one of their names is first
asked for: what reads only a drafter's config (train's --estimate, a pre-flight check, export's
refusals) answers without starting torch."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pipeline.drafter.config import EXPORT_KEYS, DrafterConfig, DrafterConfigError

if TYPE_CHECKING:
    from pipeline.drafter.model import Eagle3Drafter, KVCache, TTTCache, load_drafter, save_drafter
    from pipeline.drafter.vocab import DraftVocab

_LAZY = {"DraftVocab": "vocab", **dict.fromkeys(
    ("Eagle3Drafter", "KVCache", "TTTCache", "load_drafter", "save_drafter"), "model")}

__all__ = [
           "EXPORT_KEYS",
           "DraftVocab",
           "DrafterConfig",
           "DrafterConfigError",
           "Eagle3Drafter",
           "KVCache",
           "TTTCache",
           "load_drafter",
           "save_drafter",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
