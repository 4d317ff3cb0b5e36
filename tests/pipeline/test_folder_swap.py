"""A stage that builds a folder beside its final place (export's drafter, demo's datasets,
tokenizer and target) makes the swap durable: the parent folder is fsynced once it names
the finished folder and no temporary, else a power cut right after could undo the rename."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_export import make_export

from pipeline import output_guard
from pipeline.demo.__main__ import main as demo_main
from pipeline.export import __main__ as export


@pytest.fixture
def synced(monkeypatch) -> list[tuple[str, list[str]]]:
    """(folder, the names it held) at each fsync of a folder, in order."""
    seen: list[tuple[str, list[str]]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            path = os.readlink(f"/proc/self/fd/{fd}")
            seen.append((path, sorted(os.listdir(path))))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def _synced_finished(seen: list[tuple[str, list[str]]], final: Path) -> bool:
    return any(path == str(final.parent) and final.name in names
               and not any(n.startswith(f".{final.name}.") for n in names) for path, names in seen)


def test_export_syncs_the_parent_once_its_folder_is_in_place_new_or_replaced(tmp_path, synced):
    out, target, _ = make_export(tmp_path)
    assert _synced_finished(synced, out)
    synced.clear()
    assert export.main(["--checkpoint", str(tmp_path / "train"), "--target", str(target), "--out", str(out)]) == 0
    assert _synced_finished(synced, out)  # the second run exchanged the old folder for the new


def test_demo_syncs_its_folder_as_each_part_arrives(tmp_path, synced):
    out = tmp_path / "assets"
    assert demo_main(["--out", str(out), "--quick"]) == 0
    held = [set(names) - {output_guard.MARKER} for path, names in synced if path == str(out)]
    arrived: set[str] = set()
    for name in ("raw", "tokenizer", "target"):  # the order demo builds them in
        arrived.add(name)
        assert arrived in held, f"{out} was never synced holding just {sorted(arrived)}: {held}"
