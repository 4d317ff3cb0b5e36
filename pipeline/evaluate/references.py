"""Greedy references kept between evaluations, so a second evaluation (another drafter,
another setting) does not decode the same answer again.

A reference is the target's greedy answer to one prompt: it depends on the target's
weights (their fingerprint, pipeline.target.weights), the compute dtype and device kind (bf16 on a
GPU may choose other tokens than fp32 on a CPU), the prompt's tokens and --max-new-tokens.
The key hashes all five; the file is one small JSON object written atomically. A file
that does not read back as a list of in-vocabulary ids is ignored and decoded afresh, and
when a speculative decode disagrees with a kept reference, the reference is decoded again
before anything is called a mismatch (the caller's job): a kept file is a hint, never the
judge.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from pipeline.atomic_io import write_json_atomic

MAX_FILE_BYTES = 1 << 20


class References:
    def __init__(self, folder: Path, target_fingerprint: str, dtype: str, device_kind: str,
                 vocab_size: int) -> None:
        self.folder = folder
        self.scope = f"{target_fingerprint}\0{dtype}\0{device_kind}"
        self.vocab_size = vocab_size
        self.hits = 0

    def _path(self, prompt: list[int], max_new: int) -> Path:
        h = hashlib.sha256(f"{self.scope}\0{max_new}\0{json.dumps(prompt)}".encode()).hexdigest()
        return self.folder / h[:2] / f"{h}.json"

    def get(self, prompt: list[int], max_new: int) -> list[int] | None:
        path = self._path(prompt, max_new)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    return None
                tokens = json.loads(f.read(MAX_FILE_BYTES + 1)).get("tokens")
        except (OSError, ValueError, AttributeError):
            return None
        if (not isinstance(tokens, list) or not 1 <= len(tokens) <= max_new
                or not all(type(t) is int and 0 <= t < self.vocab_size for t in tokens)):
            return None
        self.hits += 1
        return tokens

    def put(self, prompt: list[int], max_new: int, tokens: list[int]) -> None:
        path = self._path(prompt, max_new)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {"tokens": tokens})
        except OSError:
            pass  # a cache that cannot be written only costs the next run its decode
