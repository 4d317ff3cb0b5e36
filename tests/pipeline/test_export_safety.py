"""pipeline.export as a careless or unlucky operator meets it: an --out that names something
precious, a drafter damaged after export, a target of another depth, a full disk, a server
running as another user."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline import output_guard
from pipeline.export import __main__ as export
from pipeline.export import convert, folder, verify
from pipeline.target.weights import target_fingerprint
from pipeline.train import checkpoint
from tests.pipeline.test_export import LAYERS, make_drafter, make_target


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _with_weights(target: Path, dtype: torch.dtype = torch.float32, seed: int = 0, **config) -> Path:
    """A target folder that also holds weights, so it has a fingerprint and a dtype."""
    cfg = json.loads((target / "config.json").read_text())
    cfg.update(config)
    (target / "config.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(seed)
    save_file({"model.norm.weight": torch.rand(32, generator=g).to(dtype)}, str(target / "model.safetensors"))
    return target


def _trained_on(run: Path, drafter, target: Path, step: int = 10) -> Path:
    """A training run whose train_state.pt names `target`'s fingerprint, as pipeline.train writes it."""
    checkpoint.save(run, drafter, {"step": step, "identity": {"store": {"target_fingerprint": target_fingerprint(target)}}})
    return run


def _export(train: Path, target: Path, out: Path, *more: str) -> int:
    return export.main(["--checkpoint", str(train), "--target", str(target), "--out", str(out), *more])


@pytest.fixture
def setup(tmp_path):
    target = _with_weights(make_target(tmp_path / "target"))
    drafter = make_drafter(target)
    train = _trained_on(tmp_path / "train", drafter, target)
    return target, drafter, train


# -- item 1: --out never destroys what it names ---------------------------------------------------

def test_export_out_set_to_the_target_is_refused_and_the_target_stays_byte_for_byte(setup, capsys):
    target, _, train = setup
    before = _tree(target)
    assert _export(train, target, target) == 2
    err = capsys.readouterr().err
    assert f"--out {target} is the input {target}" in err and "Traceback" not in err
    assert _tree(target) == before
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]


def test_export_out_set_to_the_training_run_keeps_its_checkpoints(setup, capsys):
    target, _, train = setup
    (train / "summary.json").write_text("{}")
    before = _tree(train)
    assert _export(train, target, train) == 2
    assert "is the input" in capsys.readouterr().err
    assert _tree(train) == before


def test_export_out_inside_the_run_or_the_target_is_refused(setup, capsys):
    target, _, train = setup
    assert _export(train, target, train / "drafter") == 2
    assert "sits inside the input" in capsys.readouterr().err
    assert _export(train, target, target / "draft") == 2
    assert not (train / "drafter").exists() and not (target / "draft").exists()


def test_export_out_set_to_a_file_leaves_the_file_where_it_was(setup, tmp_path, capsys):
    target, _, train = setup
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert _export(train, target, notes) == 2
    assert "is a file" in capsys.readouterr().err
    assert notes.read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "target", "train"]


def test_export_refuses_an_existing_folder_it_did_not_write(setup, tmp_path, capsys):
    target, _, train = setup
    other = tmp_path / "results"
    other.mkdir()
    (other / "eval.json").write_text("[1.9]")
    assert _export(train, target, other) == 2
    err = capsys.readouterr().err
    assert "has no .eagle3-writer marker of pipeline.export" in err and "pass a new folder" in err
    assert _tree(other) == {"eval.json": b"[1.9]"}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _export(train, target, empty) == 0  # an empty folder holds nothing to lose
    assert output_guard.writer_of(empty) == "pipeline.export"


def test_a_drafter_folder_an_earlier_export_wrote_is_replaced_but_one_with_more_in_it_is_not(setup, tmp_path,
                                                                                              capsys):
    target, _, train = setup
    old = tmp_path / "old"
    assert _export(train, target, old) == 0
    for name in (output_guard.MARKER, folder.MANIFEST_FILE):
        (old / name).unlink()  # what the earlier version left: config.json and model.safetensors
    assert _export(train, target, old) == 0
    assert output_guard.writer_of(old) == folder.WRITER
    for name in (output_guard.MARKER, folder.MANIFEST_FILE):
        (old / name).unlink()
    (old / "README.md").write_text("my notes")
    assert _export(train, target, old) == 2
    assert (old / "README.md").read_text() == "my notes"


# -- item 2: --verify reads the bytes --------------------------------------------------------------

@pytest.fixture
def exported(setup, tmp_path):
    target, _, train = setup
    out = tmp_path / "drafter"
    assert _export(train, target, out) == 0
    assert export.main(["--verify", str(out), "--target", str(target)]) == 0
    return out, target


def test_verify_fails_a_drafter_cut_short(exported, capsys):
    out, target = exported
    weights = out / "model.safetensors"
    size = weights.stat().st_size
    os.truncate(weights, size * 2 // 3)
    capsys.readouterr()
    assert export.main(["--verify", str(out), "--target", str(target)]) == 1
    err = capsys.readouterr().err
    assert "the file is cut or padded" in err and f"{size}" in err


def test_verify_fails_a_drafter_holding_nan(exported, capsys):
    out, _ = exported
    w = load_file(str(out / "model.safetensors"))
    w["lm_head.weight"].view(-1)[:64] = float("nan")
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    capsys.readouterr()
    assert export.main(["--verify", str(out)]) == 1
    assert "lm_head.weight holds 64 NaN or Inf values" in capsys.readouterr().err


def test_verify_counts_the_values_torch_calls_not_finite_in_every_float_dtype(tmp_path):
    """--verify reads bits, not torch tensors: every NaN (any payload, either sign), Inf and
    nothing else, in each dtype an export may hold, as torch.isfinite counts them."""
    special = [float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, 65504.0, 3.0e38, -1.0]
    tensors = {}
    for dtype, bits in ((torch.bfloat16, torch.int16), (torch.float16, torch.int16), (torch.float32, torch.int32),
                        (torch.float64, torch.int64)):
        info = torch.iinfo(bits)
        noise = torch.randint(info.min, info.max, (4096,), dtype=bits, generator=torch.Generator().manual_seed(3))
        tensors[f"noise.{dtype}"] = noise.view(dtype)
        tensors[f"special.{dtype}"] = torch.tensor(special, dtype=torch.float64).to(dtype)
        tensors[f"finite.{dtype}"] = torch.linspace(-2, 2, 7, dtype=dtype)
    tensors["ids"] = torch.arange(5)
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    header, start, _size = folder.safetensors_layout(path)
    want = sorted(f"{path}: {name} holds {int((~torch.isfinite(t)).sum())} NaN or Inf values; export an earlier "
                  "checkpoint" for name, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all())
    assert len(want) == 8  # noise and the specials of each dtype
    assert sorted(verify.nonfinite_problems(path, header, start)) == want


def test_verify_answers_without_starting_torch(exported):
    """A config's pre-flight runs it before every evaluation, and the run after every export:
    starting torch would cost each of them seconds of a core."""
    out, target = exported
    code = ("import sys; from pipeline.export.__main__ import main; rc = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'the check imported torch'; sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, "--verify", str(out), "--target", str(target)],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr
    assert "all finite, checksums match, for this target" in done.stdout


def test_verify_fails_a_byte_changed_after_export(exported, capsys):
    out, _ = exported
    weights = out / "model.safetensors"
    header, start, _ = folder.safetensors_layout(weights)
    lo = start + header["fc.weight"]["data_offsets"][0]
    with open(weights, "r+b") as f:  # the lowest mantissa byte: still a finite float
        f.seek(lo)
        b = f.read(1)
        f.seek(lo)
        f.write(bytes([b[0] ^ 1]))
    capsys.readouterr()
    assert export.main(["--verify", str(out)]) == 1
    assert "differs from the manifest's" in capsys.readouterr().err


def test_verify_names_a_folder_without_a_checksum_manifest(exported, capsys):
    out, _ = exported
    (out / "eagle3-export.json").unlink()
    capsys.readouterr()
    assert export.main(["--verify", str(out)]) == 1
    assert "no checksum manifest" in capsys.readouterr().err


def test_verify_against_another_target_with_the_same_shape_names_its_fingerprint(exported, tmp_path, capsys):
    out, target = exported
    twin = _with_weights(make_target(tmp_path / "twin"), seed=7)
    capsys.readouterr()
    assert export.main(["--verify", str(out), "--target", str(twin)]) == 1
    err = capsys.readouterr().err
    assert f"exported for the target weights {target_fingerprint(target)}" in err
    assert target_fingerprint(twin) in err


# -- item 3: a checkpoint exports only for the target it was trained on --------------------------

def test_export_refuses_a_deeper_copy_of_the_target_with_the_same_width_and_vocab(setup, tmp_path, capsys):
    target, _, train = setup
    deeper = _with_weights(make_target(tmp_path / "deeper", num_hidden_layers=2 * LAYERS), seed=1)
    out = tmp_path / "drafter"
    assert _export(train, deeper, out) == 2
    err = capsys.readouterr().err
    assert "was trained on hidden states of the target weights" in err and target_fingerprint(target) in err
    assert target_fingerprint(deeper) in err and "another model, depth or revision" in err
    assert not out.exists() and not list(tmp_path.glob(".drafter*"))


def test_the_manifest_records_the_targets_fingerprint(exported):
    out, target = exported
    manifest = json.loads((out / "eagle3-export.json").read_text())
    assert manifest["target_fingerprint"] == target_fingerprint(target)
    assert sorted(manifest["files"]) == ["config.json", "model.safetensors"]


# -- item 6: a failed export leaves no temporary, a full disk says where and how much -------------

def test_a_full_disk_during_export_exits_3_naming_the_volume_and_leaves_the_old_drafter(exported, setup, tmp_path,
                                                                                     monkeypatch, capsys):
    out, target = exported
    _, _, train = setup
    before = _tree(out)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("safetensors.torch.save_file", full)
    capsys.readouterr()
    assert _export(train, target, out) == 3
    err = capsys.readouterr().err
    assert f"the disk is full on {output_guard.volume_of(out)}" in err and "bytes)" in err and "Traceback" not in err
    assert _tree(out) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_export_that_fails_its_own_check_leaves_no_temporary(setup, tmp_path, monkeypatch, capsys):
    target, _, train = setup
    monkeypatch.setattr(convert, "verify_folder", lambda folder, target=None: [f"{folder}: made up problem"])
    assert _export(train, target, tmp_path / "drafter") == 1
    assert "made up problem" in capsys.readouterr().err
    assert not (tmp_path / "drafter").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- item 11: the target's dtype, files any user can read ----------------------------------------

def test_export_writes_a_bf16_target_s_drafter_in_bf16_unless_told_otherwise(tmp_path):
    target = _with_weights(make_target(tmp_path / "target"), dtype=torch.bfloat16, torch_dtype="bfloat16")
    train = _trained_on(tmp_path / "train", make_drafter(target), target)
    out = tmp_path / "drafter"
    assert _export(train, target, out) == 0
    header, _, _ = folder.safetensors_layout(out / "model.safetensors")
    floats = {e["dtype"] for e in header.values() if e["dtype"] not in ("I64", "BOOL")}
    assert floats == {"BF16"}
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert _export(train, target, out, "--dtype", "fp32") == 0
    header, _, _ = folder.safetensors_layout(out / "model.safetensors")
    assert {e["dtype"] for e in header.values() if e["dtype"] not in ("I64", "BOOL")} == {"F32"}


def test_target_dtype_is_read_from_the_weights_when_the_config_names_none(tmp_path):
    target = _with_weights(make_target(tmp_path / "target"), dtype=torch.float16)
    assert convert.target_dtype(target) == "float16"


def test_exported_files_are_readable_by_a_server_of_another_user_even_under_umask_077(setup, tmp_path):
    target, _, train = setup
    old = os.umask(0o077)
    try:
        assert _export(train, target, tmp_path / "drafter") == 0
        assert _export(train, target, tmp_path / "private", "--mode", "0640") == 0
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json", "eagle3-export.json"):
        assert stat.S_IMODE((tmp_path / "drafter" / name).stat().st_mode) == 0o644, name
        assert stat.S_IMODE((tmp_path / "private" / name).stat().st_mode) == 0o640, name
    assert stat.S_IMODE((tmp_path / "drafter").stat().st_mode) == 0o755
