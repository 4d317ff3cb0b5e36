"""Reading the JSON files a stage needs (a target's config.json, merge stats, a store's meta):
one place that turns a missing, damaged, oversized or not-a-file path into the stage's own
one-line input error, so no stage lets a FileNotFoundError or a JSONDecodeError traceback
reach the operator, nor reads `/dev/zero` until memory runs out or blocks on a FIFO."""

from __future__ import annotations

import json
import os
from typing import Any

from pipeline.bounded_read import read_bounded

MAX_BYTES = 64 << 20  # far above any config, stats or meta file; a bound, not a size anyone meets


def read_json(path: str | os.PathLike[str], missing: str, error: type[Exception], limit: int = MAX_BYTES) -> Any:
    """The parsed file; `error(missing)` when it does not exist (`missing` says what to do),
    `error` naming the file when it is not a regular file of at most `limit` bytes or not
    valid JSON."""
    try:
        return json.loads(read_bounded(path, limit))
    except FileNotFoundError:
        raise error(missing) from None
    except OSError as e:
        raise error(f"{path}: cannot be read ({getattr(e, 'why', None) or e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise error(f"{path}: not valid JSON ({e})") from None
