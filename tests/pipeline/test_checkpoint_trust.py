"""A training checkpoint is outside input: resume and export must refuse a crafted or damaged
one with exit 2 naming the file, never run code from it or die with a traceback type."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.export import __main__ as export
from pipeline.train import checkpoint

STEPS = ("--steps", "2", "--max-len", "64", "--workers", "0", "--batch-size", "8", "--save-every", "2")


def _train(store: Path, target: Path, out: Path, *more: str) -> int:
    from pipeline.train.__main__ import main

    return main(["--store", str(store), "--target", str(target), "--out", str(out), *STEPS, *more])


@pytest.fixture(scope="module")
def trained(reference_store, tiny_target, tmp_path_factory) -> Path:
    """A real two-step run, as pipeline.train writes it."""
    run = tmp_path_factory.mktemp("trained") / "run"
    assert _train(reference_store, tiny_target, run) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _ckpt(run: Path) -> Path:
    return run / checkpoint.DIR / "step_00000002"


def _resume(run: Path, reference_store: Path, tiny_target: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = _train(reference_store, tiny_target, run, "--resume", "--steps", "3")
    return rc, capsys.readouterr().err


class _RunsCode:
    """Pickles as a call of os.system: loading it with weights_only=False runs the command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _craft(state_file: Path, marker: Path) -> None:
    state = torch.load(state_file, map_location="cpu", weights_only=True)
    state["identity"]["payload"] = _RunsCode(f"touch {marker}")
    state_file.unlink()
    torch.save(state, state_file)


def test_the_real_state_of_a_run_resumes_under_the_safe_loader(run, reference_store, tiny_target, capsys):
    rc, err = _resume(run, reference_store, tiny_target, capsys)
    assert rc == 0, err
    assert (run / checkpoint.DIR / "latest").read_text().strip() == "step_00000003"


def test_a_crafted_state_that_would_run_a_command_is_refused_by_resume_and_export(run, reference_store, tiny_target,
                                                                                 tmp_path, capsys):
    marker = tmp_path / "ran"
    state_file = _ckpt(run) / checkpoint.STATE_FILE
    _craft(state_file, marker)
    rc, err = _resume(run, reference_store, tiny_target, capsys)
    assert rc == 2, err
    assert str(state_file) in err and "Traceback" not in err
    assert not marker.exists()
    rc = export.main(["--checkpoint", str(run), "--target", str(tiny_target), "--out", str(tmp_path / "drafter")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(state_file) in err
    assert not marker.exists()
    assert not (tmp_path / "drafter").exists()


@pytest.mark.parametrize("step", [-5, "12", 10 ** 6, True, 2.0])
def test_a_state_whose_step_is_not_its_folder_s_is_refused_and_latest_stays(run, reference_store, tiny_target,
                                                                            capsys, step):
    state_file = _ckpt(run) / checkpoint.STATE_FILE
    state = torch.load(state_file, map_location="cpu", weights_only=True)
    state["step"] = step
    torch.save(state, state_file)
    rc, err = _resume(run, reference_store, tiny_target, capsys)
    assert rc == 2, err
    assert str(state_file) in err and "step" in err
    assert (run / checkpoint.DIR / "latest").read_text().strip() == "step_00000002"
    assert sorted(p.name for p in (run / checkpoint.DIR).iterdir()) == ["latest", "step_00000002"]


def test_a_checkpoint_whose_weights_were_cut_short_is_refused_naming_the_file(run, reference_store, tiny_target,
                                                                             capsys):
    weights = _ckpt(run) / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 100])
    rc, err = _resume(run, reference_store, tiny_target, capsys)
    assert rc == 2, err
    assert str(weights) in err and "Traceback" not in err


def test_an_optimizer_tensor_of_another_shape_is_refused(run, reference_store, tiny_target, capsys):
    state_file = _ckpt(run) / checkpoint.STATE_FILE
    state = torch.load(state_file, map_location="cpu", weights_only=True)
    slot = state["optimizer"]["state"][0]
    slot["exp_avg"] = slot["exp_avg"].reshape(-1)[:-1].clone()
    torch.save(state, state_file)
    rc, err = _resume(run, reference_store, tiny_target, capsys)
    assert rc == 2, err
    assert str(state_file) in err and "exp_avg" in err


def test_saving_never_moves_latest_back_to_an_earlier_step(tmp_path):
    from tests.pipeline.test_export import make_drafter, make_target

    drafter = make_drafter(make_target(tmp_path / "target"))
    run = tmp_path / "run"
    checkpoint.save(run, drafter, {"step": 36})
    with pytest.raises(checkpoint.BadInput, match="step_00000036"):
        checkpoint.save(run, drafter, {"step": 0})
    assert (run / checkpoint.DIR / "latest").read_text().strip() == "step_00000036"


def test_a_second_train_on_a_run_folder_in_use_is_refused_naming_the_holder(run, reference_store, tiny_target, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom pipeline.train import checkpoint\n"
         "checkpoint.claim_run_folder(sys.argv[1])\nprint('held', flush=True)\nsys.stdin.read()", str(run)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, err = _resume(run, reference_store, tiny_target, capsys)
        assert rc == 2, err
        assert str(run) in err and f"pid {holder.pid}" in err
        assert sorted(p.name for p in (run / checkpoint.DIR).iterdir()) == ["latest", "step_00000002"]
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    rc, err = _resume(run, reference_store, tiny_target, capsys)  # the holder ended: the folder is free
    assert rc == 0, err
