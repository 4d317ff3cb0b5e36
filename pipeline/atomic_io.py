"""Crash-safe writes for every stage: a file is either the old one or the complete new one,
never half of each, so a killed merge or extraction never leaves a file that looks finished.

The primitives live in `pipeline.events` (the console writes its run files with the same
code, and that is the one pipeline module it may import); this module adds the stages'
JSON layout. Folders are swapped in by `pipeline.output_guard`, which also decides which
existing folder a stage may replace."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.events import TEMP_SUFFIX, fsync_dir, write_all, write_bytes_atomic
from pipeline.output_guard import swap_folder_in

__all__ = ["TEMP_SUFFIX", "fsync_dir", "swap_folder_in", "write_all", "write_bytes_atomic", "write_json_atomic"]


def write_json_atomic(path: Path, obj: object, tag: str = "") -> None:
    """Temp + fsync + rename; `tag` keeps concurrent writers (ranks) off each other's temp."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(), tag)
