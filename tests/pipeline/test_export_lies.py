"""An exported drafter's config.json is checked against its weights and its target, so a lie
resealed into eagle3-export.json (its size and checksum recomputed) does not pass: `export
--verify` names it, and evaluate refuses it with one line naming the file (before, verify
passed four such lies, and evaluate exited 1 with load_state_dict's many lines, or 0 with
figures)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_evaluate as base  # noqa: E402

from pipeline.checksum import ALGO, file_checksum  # noqa: E402
from pipeline.evaluate.__main__ import main as evaluate  # noqa: E402
from pipeline.export.__main__ import main as export  # noqa: E402

tiny = base.tiny

LIES = {  # name -> (what config.json says instead, whether the weights' shapes show it)
    "a wider hidden size": ({"hidden_size": 64}, True),
    "a larger MLP": ({"intermediate_size": 128}, True),
    "a larger vocabulary": ({"vocab_size": 256}, True),
    "a smaller draft vocabulary": ({"draft_vocab_size": 63}, True),
    "more key-value heads": ({"num_key_value_heads": 4}, True),
    "twice the heads of half the size": ({"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 4}, False),
    "another norm epsilon": ({"rms_norm_eps": 0.01}, False),
}


def _lying(drafter: Path, tmp_path: Path, change: dict) -> Path:
    """A copy of the drafter whose config.json says `change`, resealed into its manifest."""
    out = tmp_path / "drafter"
    shutil.copytree(drafter, out)
    cfg_path = out / "config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), **change}))
    manifest_path = out / "eagle3-export.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["config.json"] = {"bytes": cfg_path.stat().st_size, ALGO: file_checksum(cfg_path)}
    manifest_path.write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("lie", sorted(LIES))
def test_export_verify_finds_a_config_that_lies_about_its_weights_though_resealed(tiny, tmp_path, capsys, lie):
    change, in_shapes = LIES[lie]
    bad = _lying(tiny["drafter"], tmp_path, change)
    if in_shapes:  # the weights alone give the lie away
        assert export(["--verify", str(bad)]) == 1
        err = capsys.readouterr().err
        assert f"{bad / 'model.safetensors'}: " in err and f"but {bad / 'config.json'} describes" in err, err
    assert export(["--verify", str(bad), "--target", str(tiny["target"])]) == 1
    err = capsys.readouterr().err
    assert str(bad / "config.json") in err and any(key in err for key in change), err
    assert "checksum" not in err  # resealed: the bytes match what the manifest says


@pytest.mark.parametrize("lie", sorted(LIES))
def test_evaluate_refuses_a_lying_config_in_one_line_naming_the_file(tiny, tmp_path, capsys, lie):
    change, _ = LIES[lie]
    bad = _lying(tiny["drafter"], tmp_path, change)
    rc = evaluate(["--drafter", str(bad), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
                   "--limit", "1", "--max-new-tokens", "4", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"evaluate: error: {bad}"), err
    assert "Traceback" not in err and "state_dict" not in err
