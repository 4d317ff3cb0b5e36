"""Training checkpoints on a full disk, saved twice, or next to folders training did not write."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from safetensors import SafetensorError

from pipeline import output_guard
from pipeline.train import checkpoint
from pipeline.train.errors import BadInput
from tests.pipeline.test_export import make_drafter, make_target


@pytest.fixture
def drafter(tmp_path):
    return make_drafter(make_target(tmp_path / "target"))


def _leftovers(run):
    return [p.name for p in (run / checkpoint.DIR).iterdir() if p.name.startswith(".") and p.name != "latest"]


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fills_after(writes: int):
    """checkpoint's write_all, failing with ENOSPC once `writes` calls went through: the disk
    fills midway through train_state.pt, where torch's zip writer hides the error."""
    real = checkpoint.write_all
    calls = []

    def write(fd, buf):
        calls.append(len(buf))
        if len(calls) > writes:
            _enospc()
        real(fd, buf)

    return write


@pytest.mark.parametrize("writes", [0, 3])
def test_a_full_disk_while_writing_train_state_stops_with_exit_3_naming_the_volume(tmp_path, drafter, monkeypatch,
                                                                                 writes):
    run = tmp_path / "run"
    checkpoint.save(run, drafter, {"step": 10})
    monkeypatch.setattr(checkpoint, "write_all", _fills_after(writes))
    with pytest.raises(checkpoint.Stopped) as e:
        checkpoint.save(run, drafter, {"step": 20})
    assert e.value.exit_code == 3
    text = str(e.value)
    assert f"the disk is full on {output_guard.volume_of(run)} while saving checkpoint step_00000020" in text
    assert "bytes)" in text and "--resume" in text and "unexpected pos" not in text
    assert _leftovers(run) == []
    assert not (run / checkpoint.DIR / "step_00000020").exists()
    assert checkpoint.latest_checkpoint(run).name == "step_00000010"


def test_a_full_disk_while_writing_the_weights_stops_with_exit_3_and_no_temp(tmp_path, drafter, monkeypatch):
    def full(*_a, **_k):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("safetensors.torch.save_file", full)
    run = tmp_path / "run"
    with pytest.raises(checkpoint.Stopped, match="the disk is full on"):
        checkpoint.save(run, drafter, {"step": 5})
    assert _leftovers(run) == [] and checkpoint.latest_checkpoint(run) is None


def test_saving_the_same_step_again_never_leaves_a_moment_without_its_folder(tmp_path, drafter, monkeypatch):
    run = tmp_path / "run"
    first = checkpoint.save(run, drafter, {"step": 10, "mark": "first"})
    seen = []
    real = {"rmtree": shutil.rmtree, "rename": os.rename, "replace": os.replace}

    def watch(name):
        def call(*a, **k):
            out = real[name](*a, **k)
            seen.append((name, first.is_dir()))
            return out
        return call

    monkeypatch.setattr(shutil, "rmtree", watch("rmtree"))
    monkeypatch.setattr(os, "rename", watch("rename"))
    monkeypatch.setattr(os, "replace", watch("replace"))
    checkpoint.save(run, drafter, {"step": 10, "mark": "second"})
    monkeypatch.undo()
    assert seen and all(present for _, present in seen), seen
    assert checkpoint.load_state(first)["mark"] == "second"
    assert _leftovers(run) == []


def test_a_step_folder_training_did_not_write_is_never_replaced(tmp_path, drafter):
    run = tmp_path / "run"
    foreign = run / checkpoint.DIR / checkpoint.step_name(10)
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(BadInput, match="has no .eagle3-writer marker of pipeline.train"):
        checkpoint.save(run, drafter, {"step": 10})
    assert sorted(os.listdir(foreign)) == ["notes.txt"]
    assert _leftovers(run) == []


def test_a_complete_checkpoint_of_an_earlier_version_without_a_marker_is_still_replaced(tmp_path, drafter):
    run = tmp_path / "run"
    folder = checkpoint.save(run, drafter, {"step": 10, "mark": "old"})
    (folder / output_guard.MARKER).unlink()
    checkpoint.save(run, drafter, {"step": 10, "mark": "new"})
    assert checkpoint.load_state(folder)["mark"] == "new"
    assert output_guard.writer_of(folder) == checkpoint.WRITER


@pytest.mark.parametrize("where", ["store", "target", "inside-store"])
def test_train_out_set_to_an_input_is_refused_before_anything_is_read(tmp_path, capsys, where):
    from pipeline.train.__main__ import main

    store, target = tmp_path / "store", tmp_path / "target"
    for d in (store, target):
        d.mkdir()
        (d / "keep.json").write_text("{}")
    out = {"store": store, "target": target, "inside-store": store / "run"}[where]
    assert main(["--store", str(store), "--target", str(target), "--out", str(out), "--device", "cpu"]) == 2
    assert "writing there would destroy what this stage reads" in capsys.readouterr().err
    assert sorted(os.listdir(store)) == ["keep.json"] and sorted(os.listdir(target)) == ["keep.json"]
