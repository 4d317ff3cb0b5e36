"""The demo's folder: whose it is (the `.eagle3-writer` marker of pipeline.demo), what an
earlier version left in it, and what a killed build left behind."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline import output_guard
from pipeline.program_edge import BadInput

WRITER = "pipeline.demo"


def claim(out: Path) -> None:
    """BadInput unless --out is a folder the demo may build into: missing, empty, or its own
    (an earlier version's complete build is adopted first)."""
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out} exists and is not a folder; pass a folder path")
    adopt_legacy(out)
    output_guard.refuse_foreign(out, WRITER)


def adopt_legacy(out: Path) -> None:
    """A complete build of a version that wrote no marker (assets.json, and nothing but the
    demo's own entries) is still the demo's: mark it so it can be rebuilt in place."""
    names = {"raw", "tokenizer", "target", "assets.json"}
    if not out.is_dir() or output_guard.writer_of(out) is not None or not (out / "assets.json").is_file():
        return
    if all(p.name in names or p.name.startswith((".raw.", ".tokenizer.", ".target.", ".assets.json"))
           for p in out.iterdir()):
        output_guard.mark(out, WRITER)


def remove_leftovers(out: Path) -> None:
    """Temporary folders of an earlier build that was killed midway."""
    for name in ("raw", "tokenizer", "target"):
        for stale in [*out.glob(f".{name}.tmp-*"), *out.glob(f".{name}.old-*")]:
            if stale.is_dir():
                shutil.rmtree(stale)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
