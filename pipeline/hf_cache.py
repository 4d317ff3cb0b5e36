"""The name a transformers model's forward gives its KV-cache argument.

transformers 5.24 renamed `past_key_values` to `cache` (the old name warns, then goes in 5.40),
and the project runs on 5.x on both sides of the rename (the GPU image has 5.17). A cache passed
under the other name is swallowed by the forward's `**kwargs` and silently ignored: each forward
then sees only the new tokens, with no context. Every caller that keeps a cache asks here.
"""

from __future__ import annotations

import inspect
from typing import Any


def cache_kwarg(model: Any) -> str:
    """`cache` or `past_key_values`, whichever this model's forward takes by name."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
