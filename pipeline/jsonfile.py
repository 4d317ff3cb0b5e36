"""Reading the JSON files a stage needs (a target's config.json, merge stats, a store's meta,
an exported drafter's config and manifest): one place that turns a missing, damaged, oversized
or not-a-file path into one `BadInput` line (exit 2), so no stage lets a FileNotFoundError or a
JSONDecodeError traceback reach the operator, nor reads `/dev/zero` until memory runs out or
blocks on a FIFO."""

from __future__ import annotations

import json
import os
from typing import Any

from pipeline.bounded_read import read_bounded
from pipeline.program_edge import BadInput

MAX_BYTES = 64 << 20  # far above any config, stats or meta file; a bound, not a size anyone meets


def read_json(path: str | os.PathLike[str], missing: str, limit: int = MAX_BYTES) -> Any:
    """The parsed file; BadInput(missing) when it does not exist (`missing` says what to do),
    BadInput naming the file when it is not a regular file of at most `limit` bytes or not
    valid JSON."""
    try:
        return json.loads(read_bounded(path, limit))
    except FileNotFoundError:
        raise BadInput(missing) from None
    except OSError as e:
        raise BadInput(f"{path}: cannot be read ({getattr(e, 'why', None) or e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise BadInput(f"{path}: not valid JSON ({e})") from None


def read_object(path: str | os.PathLike[str], missing: str, limit: int = MAX_BYTES) -> dict:
    """read_json of a file that must hold a JSON object (a config, a manifest); BadInput
    naming the file and what it holds instead."""
    obj = read_json(path, missing, limit)
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj
