"""The EAGLE-3 drafter: its config (SGLang's config.json), model (SGLang's weight names), draft
vocabulary (d2t/t2d) and the target tensors it borrows. See model.py's docstring for the API."""

from pipeline.drafter.config import DrafterConfig, DrafterConfigError
from pipeline.drafter.model import EXPORT_KEYS, Eagle3Drafter, KVCache, TTTCache, load_drafter, save_drafter
from pipeline.drafter.vocab import DraftVocab

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
