"""A relative path given on the command line is read against the config's folder, so a
config means the same from any shell. A newcomer types paths from the repository root
instead (`--set target=configs/examples/models/smol` beside `configs/examples/x.yaml`),
and the check that fails then names a doubled path without saying why. This module finds
such a value and says where it was resolved, why, and what to type instead."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path


def _path_like(value: str) -> bool:
    return "/" in value or value.startswith(".")


def misread_paths(root: Path, values: Mapping[str, str], cwd: Path, flag: str = "--set") -> Iterator[str]:
    """One line for each relative path in `values` that does not exist under `root` (the
    config's folder) but does from `cwd` (the shell's folder)."""
    for name, value in values.items():
        text = os.path.expanduser(value.strip())
        if not text or "${" in text or "://" in text or os.path.isabs(text) or not _path_like(text):
            continue
        there, here = root / text, cwd / text
        if there.exists() or not here.exists():
            continue
        yield (f"{flag} {name}={value}: a relative path is read relative to the config's folder "
               f"({root}), so the config means the same from any shell; {there} does not exist. "
               f"From this shell's folder it is {here.resolve()}: pass {flag} {name}={here.resolve()}")
