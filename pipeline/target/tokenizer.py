"""The target's tokenizer by what it maps, not by where it lives or how big it is.

Merged data is token ids: the same ids mean other text under another tokenizer, so a drafter
trained online on data merged with another tokenizer learns from noise, and nothing fails. A
tokenizer of the same size proves nothing (a permuted vocabulary has it), and a path proves
nothing either (a folder re-downloaded, a tokenizer swapped in place). So merge records
`tokenizer_identity(its tokenizer)` in its stats, and online training and extraction compute
the same of the target's tokenizer and refuse a difference (`check_merged_with`).

The identity hashes every token with its id (the vocabulary, added and special tokens
included) and, for a BPE model, its merges in order (a tokenizer with the same vocabulary and
other merges splits text differently). Value: "tok1:" + 32 hex digits (sha256, cut).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pipeline.records.merge_stats import MergeStats
from pipeline.target.config import TargetError

PREFIX = "tok1:"


def tokenizer_identity(tokenizer: Any) -> str:
    """'tok1:<32 hex>' of a loaded transformers tokenizer (see the module docstring)."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    merges: list = []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        model = json.loads(backend.to_str()).get("model") or {}
        merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model.get("merges") or ()]
    blob = json.dumps({"vocab": vocab, "merges": merges}, ensure_ascii=False, separators=(",", ":"))
    return PREFIX + hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def load_identity(folder: Path | str, flag: str = "--target") -> str:
    """tokenizer_identity of the tokenizer saved in `folder`; TargetError (exit 2) naming the
    folder when it holds none that loads."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:  # noqa: BLE001 - a damaged tokenizer file raises anything (KeyError, tokenizers' own)
        first = (str(e).splitlines() or [""])[0]
        raise TargetError(f"{folder} ({flag}): no tokenizer loads from it ({type(e).__name__}: {first}); save the "
                          "target's tokenizer beside its weights (tokenizer.json)") from None
    return tokenizer_identity(tokenizer)


def check_merged_with(recorded: MergeStats, stats: Path, data: Path, target: Path | str, flag: str,
                      unchecked: str) -> None:
    """The tokenizer merge recorded in `stats` for `data` must be the target's; TargetError
    (exit 2) naming the data, the stats and both tokenizers otherwise, or saying that the
    stats record none (`unchecked`: how to go on without the check)."""
    if recorded.tokenizer_identity is None:
        raise TargetError(f"{stats}: records no tokenizer_identity (merged before merge recorded it), so nothing "
                          f"proves {data} was tokenized by {target}'s tokenizer: merge again, or {unchecked}")
    have = load_identity(target, flag)
    if have != recorded.tokenizer_identity:
        raise TargetError(f"{data} was merged with the tokenizer {recorded.tokenizer} ({recorded.tokenizer_identity}, "
                          f"{stats}) but the target {target} has {have}: its vocabulary or merges differ, so the "
                          f"same ids mean other text; merge again with --tokenizer {target}")
