"""Reading the JSON files a stage needs (a target's config.json, merge stats, a store's meta):
one place that turns a missing or damaged file into the stage's own one-line input error, so
no stage lets a FileNotFoundError or a JSONDecodeError traceback reach the operator."""

from __future__ import annotations

import json
import os
from typing import Any


def read_json(path: str | os.PathLike[str], missing: str, error: type[Exception]) -> Any:
    """The parsed file; `error(missing)` when it does not exist (`missing` says what to do),
    `error` naming the file when it is not valid JSON."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise error(missing) from None
    except ValueError as e:
        raise error(f"{path}: not valid JSON ({e})") from None
