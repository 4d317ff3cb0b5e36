"""Every record by its tag, for a reader that takes whatever JSON it is given: the console's
checks read the files and program outputs a config names (a stage's stats, a store's meta, a
`--estimate --json` line) by the keys the config writes. A value that carries a record's tag is
read through that record's own reader first, so a check never takes a figure from a record it
cannot vouch for (a version it does not know, a field of the wrong type); JSON without a tag (a
target's config.json, a file written before records carried their tag) passes as it is."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from pipeline.bounded_read import read_bounded
from pipeline.records import (
    evaluate_report,
    extract_estimate,
    merge_stats,
    regenerate_estimate,
    regenerate_stats,
    synthesis_estimate,
    synthesis_stats,
    train_estimate,
    train_summary,
)
from pipeline.records.codec import MAX_BYTES, TAG

FILES: dict[str, Callable[[str], object]] = {
    evaluate_report.KIND.tag: evaluate_report.read_report,
    train_summary.KIND.tag: train_summary.read_summary,
    merge_stats.KIND.tag: merge_stats.read_stats,
    regenerate_stats.KIND.tag: regenerate_stats.read_stats,
    synthesis_stats.KIND.tag: synthesis_stats.read_stats,
}
LINES: dict[str, Callable[[str | bytes, str], object]] = {
    train_estimate.KIND.tag: train_estimate.parse_estimate,
    extract_estimate.KIND.tag: extract_estimate.parse_estimate,
    regenerate_estimate.KIND.tag: regenerate_estimate.parse_estimate,
    synthesis_estimate.KIND.tag: synthesis_estimate.parse_estimate,
}


def _tag(obj: Any) -> object:
    return obj.get(TAG) if isinstance(obj, dict) else None


def load_file(path: str | os.PathLike[str], limit: int = MAX_BYTES) -> Any:
    """The JSON value of a regular file of at most `limit` bytes, a tagged record checked by its
    reader. OSError (a missing or unreadable file; RefusedFile for a FIFO or an oversized one),
    ValueError (not JSON) and RecordError (a record its reader refuses) pass to the caller."""
    raw = read_bounded(path, limit)
    obj = json.loads(raw)
    tag = _tag(obj)
    if tag in FILES:
        FILES[tag](os.fspath(path))
    elif tag in LINES:
        LINES[tag](raw, os.fspath(path))
    return obj


def load_output(text: str, source: str) -> Any:
    """The JSON value a program printed (`source` names it), a tagged `--estimate --json` line
    checked by its reader. ValueError (not JSON) and RecordError pass to the caller."""
    obj = json.loads(text)
    tag = _tag(obj)
    if tag in LINES:
        LINES[tag](text, source)
    return obj
