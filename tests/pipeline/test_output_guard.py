"""The output-folder rule every writer follows (pipeline/output_guard.py), on its own: which
--out is refused, what a swap leaves, and what a failed build leaves."""

from __future__ import annotations

import errno
import os

import pytest

from pipeline import output_guard as og


def test_an_out_equal_to_inside_or_holding_an_input_is_refused(tmp_path):
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    for out, why in ((data, "is"), (data / "raw" / "merged", "sits inside"), (tmp_path, "contains")):
        with pytest.raises(og.BadInput, match=f"--out {out} {why} the input {data}") as e:
            og.refuse_overlap(out, [None, data])
        assert e.value.exit_code == 2
    og.refuse_overlap(tmp_path / "data2", [data])  # a sibling whose name merely starts alike


def test_a_symlink_does_not_hide_an_overlap(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "alias").symlink_to(target)
    with pytest.raises(og.BadInput, match="is the input"):
        og.refuse_overlap(tmp_path / "alias", [target], flag="--out")
    with pytest.raises(og.BadInput, match="sits inside"):
        og.refuse_overlap(tmp_path / "alias" / "new", [target])


def test_only_an_absent_empty_or_own_folder_may_be_replaced(tmp_path):
    og.refuse_foreign(tmp_path / "absent", "w")
    (tmp_path / "empty").mkdir()
    og.refuse_foreign(tmp_path / "empty", "w")
    own = tmp_path / "own"
    own.mkdir()
    (own / "x").write_text("1")
    og.mark(own, "w")
    og.refuse_foreign(own, "w")
    with pytest.raises(og.BadInput, match="was written by w"):
        og.refuse_foreign(own, "another")
    (tmp_path / "file").write_text("keep")
    with pytest.raises(og.BadInput, match="is a file"):
        og.refuse_foreign(tmp_path / "file", "w")
    (tmp_path / "link").symlink_to(own)
    with pytest.raises(og.BadInput, match="is a symlink"):
        og.refuse_foreign(tmp_path / "link", "w")


def test_a_swap_never_hides_or_replaces_a_file(tmp_path):
    new = tmp_path / "new"
    new.mkdir()
    (tmp_path / "final").write_text("a file")
    with pytest.raises(og.BadInput):
        og.swap_folder_in(new, tmp_path / "final")
    assert (tmp_path / "final").read_text() == "a file" and sorted(os.listdir(tmp_path)) == ["final", "new"]


def test_a_failed_build_leaves_no_temporary_and_the_old_folder(tmp_path):
    final = tmp_path / "out"
    with og.staged_folder(final, "w", "building") as tmp:
        (tmp / "v").write_text("1")
    with pytest.raises(RuntimeError), og.staged_folder(final, "w", "building") as tmp:
        (tmp / "v").write_text("2")
        raise RuntimeError("boom")
    assert (final / "v").read_text() == "1" and sorted(os.listdir(tmp_path)) == ["out"]


def test_a_full_disk_while_building_is_exit_3_with_the_volume_and_the_bytes(tmp_path):
    with pytest.raises(og.OutOfSpace) as e, og.staged_folder(tmp_path / "out", "w", "writing the thing",
                                                               need=5_000_000_000):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert e.value.exit_code == 3
    assert f"the disk is full on {og.volume_of(tmp_path)} while writing the thing" in str(e.value)
    assert "5.0 GB (5000000000 bytes)" in str(e.value) and "free" in str(e.value)
    assert os.listdir(tmp_path) == []


def test_the_temporary_of_a_writer_killed_outright_is_swept_by_the_next_build(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = tmp_path / f".out.tmp-{int(dead.stdout)}"
    stale.mkdir()
    (stale / "half").write_bytes(b"x" * 100)
    live = tmp_path / f".out.tmp-{os.getppid()}"  # a live writer's: left alone
    live.mkdir()
    with og.staged_folder(tmp_path / "out", "w", "building") as tmp:
        (tmp / "v").write_text("1")
    assert sorted(os.listdir(tmp_path)) == [live.name, "out"]
