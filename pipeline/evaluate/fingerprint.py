"""What the drafter folder held when it was loaded, so a report is never recorded against
other files: export swaps a whole new folder in under the same name, and an evaluation
that started before the swap would otherwise label the old drafter's figures with the
new one's path.

A fingerprint is the size and SHA-256 of every file at the folder's top level. Taken
before the weights are read and again before the report is written; any difference
(a file replaced, added, removed, or unreadable) refuses the report.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipeline.evaluate.errors import BadInput
from pipeline.records.evaluate_report import FileFingerprint

MAX_FILES = 256
_BLOCK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def take(folder: Path) -> dict[str, tuple[int, str]]:
    """{file name: (bytes, sha256)}; BadInput for a folder that is not there or too large to list."""
    folder = Path(folder)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise BadInput(f"--drafter {folder}: cannot be listed ({e.strerror or e})") from None
    if len(entries) > MAX_FILES:
        raise BadInput(f"--drafter {folder}: {len(entries)} entries, more than an exported drafter's "
                       f"{MAX_FILES}; point --drafter at the folder pipeline.export wrote")
    out: dict[str, tuple[int, str]] = {}
    for entry in entries:
        if entry.is_file(follow_symlinks=True):
            try:
                out[entry.name] = (entry.stat().st_size, _sha256(Path(entry.path)))
            except OSError as err:
                out[entry.name] = (-1, f"unreadable: {err.strerror or err}")
    return out


def differences(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    """One phrase per file that is not as it was."""
    said = []
    for name in sorted(set(before) | set(after)):
        if name not in after:
            said.append(f"{name} is gone")
        elif name not in before:
            said.append(f"{name} appeared")
        elif before[name] != after[name]:
            (b_size, _), (a_size, a_hash) = before[name], after[name]
            said.append(f"{name} {a_hash}" if a_size < 0 else
                        f"{name} changed ({b_size} -> {a_size} bytes)" if a_size != b_size else f"{name} changed")
    return said


def summary(fp: dict[str, tuple[int, str]]) -> dict[str, FileFingerprint]:
    """The fingerprint as the report records it."""
    return {name: FileFingerprint(bytes=size, sha256=digest) for name, (size, digest) in fp.items()}
