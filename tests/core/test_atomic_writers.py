"""One crash-safe writer for the console and the pipeline, and every swap of a finished
file or folder ends with the folder fsynced (else a power cut can undo the rename)."""

from __future__ import annotations

import os
import stat

import pytest

from console.core.files import atomicfile as console_atomicfile
from console.core.files.atomicfile import atomic_write_json
from pipeline import atomic_io


@pytest.fixture
def synced(monkeypatch):
    """The folders fsynced, in order."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_console_and_pipeline_share_the_writer():
    assert console_atomicfile.write_bytes_atomic is atomic_io.write_bytes_atomic
    assert console_atomicfile.fsync_dir is atomic_io.fsync_dir


def test_console_json_is_private_whole_and_its_folder_synced(tmp_path, synced):
    target = tmp_path / "run" / "exit"
    atomic_write_json(target, {"code": 0})
    assert target.read_text() == '{\n "code": 0\n}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert synced[-1] == str(target.parent)
    assert os.listdir(target.parent) == ["exit"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "stats.json"
    atomic_io.write_json_atomic(target, {"n": 1})

    def boom(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_io, "write_all", boom)
    with pytest.raises(OSError):
        atomic_io.write_json_atomic(target, {"n": 2})
    assert '"n": 1' in target.read_text() and os.listdir(tmp_path) == ["stats.json"]


def test_one_nearest_existing_for_checks_and_the_disk_panel(tmp_path, monkeypatch):
    from console.core.checks import fs
    from console.core.telemetry import disk

    assert fs.nearest_existing is disk.nearest_existing
    monkeypatch.chdir(tmp_path)
    assert fs.nearest_existing(tmp_path / "a" / "b") == tmp_path
    assert fs.nearest_existing("a/b") == tmp_path  # relative: against the working folder, absolute out


def test_merge_makes_the_stats_removal_and_the_dataset_rename_durable_in_order(tmp_path, synced, monkeypatch):
    from pipeline.merge import output

    real_replace = os.replace
    monkeypatch.setattr(output.os, "replace", lambda a, b: (synced.append("replace"), real_replace(a, b))[1])
    (tmp_path / "train.stats.json").write_text("{}")
    part = tmp_path / "part"
    part.write_bytes(b'{"a": 1}\n')
    synced_before = len(synced)
    output.write_merged(tmp_path / "train.jsonl", [(str(part), 0, 9)], tmp_path / "train.stats.json")
    assert (tmp_path / "train.jsonl").read_bytes() == b'{"a": 1}\n'
    assert not (tmp_path / "train.stats.json").exists()
    assert synced[synced_before:] == [str(tmp_path), "replace", str(tmp_path)]
