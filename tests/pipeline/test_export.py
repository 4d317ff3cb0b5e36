"""pipeline.export: the SGLang folder it writes, and what it refuses to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipeline.drafter import EXPORT_KEYS, DrafterConfig, Eagle3Drafter
from pipeline.drafter import vocab as dvocab
from pipeline.export import __main__ as export
from pipeline.export import verify
from pipeline.program_edge import BadInput
from pipeline.target.config import sglang_layer_ids
from pipeline.train import checkpoint

LAYERS = 8
ROPE_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500000.0}


def make_target(path: Path, **overrides) -> Path:
    """A config.json-only target: export reads nothing else of it."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": LAYERS,
           "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
           "rope_parameters": dict(ROPE_LLAMA3), **overrides}
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def make_drafter(target: Path, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    cfg = DrafterConfig.from_target(json.loads((target / "config.json").read_text()), draft_vocab_size=64)
    m = Eagle3Drafter(cfg)
    m.set_vocab(dvocab.from_counts(torch.randint(0, 50, (cfg.vocab_size,)), cfg.draft_vocab_size))
    return m


def make_checkpoint(run: Path, drafter: Eagle3Drafter, step: int = 10) -> Path:
    """A training run folder as pipeline.train writes it (checkpoints/step_*/ + latest)."""
    checkpoint.save(run, drafter, {"step": step})
    return run


def make_export(tmp_path: Path, **target_overrides) -> tuple[Path, Path, Eagle3Drafter]:
    target = make_target(tmp_path / "target", **target_overrides)
    drafter = make_drafter(target)
    train = make_checkpoint(tmp_path / "train", drafter)
    out = tmp_path / "drafter"
    assert export.main(["--checkpoint", str(train), "--target", str(target), "--out", str(out)]) == 0
    return out, target, drafter


def test_export_writes_the_sglang_folder_with_the_targets_rope_and_capture_ids(tmp_path, capsys):
    out, _target, drafter = make_export(tmp_path)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["rope_parameters"] == ROPE_LLAMA3 and "rope_scaling" not in cfg and "rope_theta" not in cfg
    assert cfg["max_position_embeddings"] == 256 and cfg["vocab_size"] == 128 and cfg["draft_vocab_size"] == 64
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, LAYERS // 2 - 1, LAYERS - 4]
    assert cfg["tie_word_embeddings"] is False
    from safetensors.torch import load_file

    w = load_file(str(out / "model.safetensors"))
    assert sorted(w) == sorted(EXPORT_KEYS)
    for k, v in drafter.state_dict().items():
        assert torch.equal(w[k], v), k
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp folder left
    assert "-> " in capsys.readouterr().out


def test_a_target_spelling_rope_the_transformers_4_way_is_copied_as_spelled(tmp_path):
    legacy = {"rope_parameters": None, "rope_theta": 500000.0,
              "rope_scaling": {k: v for k, v in ROPE_LLAMA3.items() if k != "rope_theta"}}
    out, _, _ = make_export(tmp_path, **legacy)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rope_scaling"] == legacy["rope_scaling"] and cfg["rope_theta"] == 500000.0
    assert "rope_parameters" not in cfg


def test_export_refuses_a_checkpoint_without_lm_head_and_writes_nothing(tmp_path, capsys):
    target = make_target(tmp_path / "target")
    train = make_checkpoint(tmp_path / "train", make_drafter(target))
    ckpt = checkpoint.latest_checkpoint(train)
    from safetensors.torch import load_file, save_file

    w = load_file(str(ckpt / "model.safetensors"))
    del w["lm_head.weight"]
    save_file(w, str(ckpt / "model.safetensors"))
    out = tmp_path / "drafter"
    assert export.main(["--checkpoint", str(train), "--target", str(target), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "lm_head.weight" in err and "random" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".drafter*"))


def test_export_refuses_a_misshapen_weight_and_a_drafter_of_another_target(tmp_path, capsys):
    target = make_target(tmp_path / "target")
    train = make_checkpoint(tmp_path / "train", make_drafter(target))
    ckpt = checkpoint.latest_checkpoint(train)
    from safetensors.torch import load_file, save_file

    w = load_file(str(ckpt / "model.safetensors"))
    w["fc.weight"] = w["fc.weight"][:, :64].contiguous()
    save_file(w, str(ckpt / "model.safetensors"))
    assert export.main(["--checkpoint", str(train), "--target", str(target), "--out", str(tmp_path / "d")]) == 2
    assert "fc.weight has shape (32, 64)" in capsys.readouterr().err

    other = make_target(tmp_path / "other", vocab_size=256)
    good = make_checkpoint(tmp_path / "train2", make_drafter(target))
    assert export.main(["--checkpoint", str(good), "--target", str(other), "--out", str(tmp_path / "d")]) == 2
    assert "vocab_size 128" in capsys.readouterr().err


def test_reexport_replaces_the_folder_whole(tmp_path):
    out, target, _ = make_export(tmp_path)
    (out / "stray.txt").write_text("from an older export")
    train = make_checkpoint(tmp_path / "train", make_drafter(target, seed=1), step=20)
    assert export.main(["--checkpoint", str(train), "--target", str(target), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".eagle3-writer", "config.json", "eagle3-export.json",
                                                    "model.safetensors"]


def test_verify_reads_the_header_and_names_what_is_missing(tmp_path, capsys):
    out, target, _ = make_export(tmp_path)
    assert export.main(["--verify", str(out), "--target", str(target)]) == 0
    from safetensors.torch import load_file, save_file

    w = load_file(str(out / "model.safetensors"))
    del w["d2t"]
    save_file(w, str(out / "model.safetensors"))
    capsys.readouterr()
    assert export.main(["--verify", str(out)]) == 1
    assert "lacks d2t" in capsys.readouterr().err
    other = make_target(tmp_path / "deeper", num_hidden_layers=12)
    problems = verify.verify_folder(out, other)
    assert any("eagle_aux_hidden_state_layer_ids" in p and "[1, 5, 8]" in p for p in problems)


def test_export_names_what_is_missing_in_its_arguments(tmp_path, capsys):
    assert export.main(["--target", str(tmp_path)]) == 2
    assert "--checkpoint" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert export.main(["--checkpoint", str(tmp_path / "empty"), "--target", str(tmp_path / "t"),
                        "--out", str(tmp_path / "o")]) == 2
    assert "latest" in capsys.readouterr().err


@pytest.mark.parametrize("layers", [6])
def test_export_refuses_a_target_too_shallow_for_three_capture_layers(tmp_path, capsys, layers):
    with pytest.raises(BadInput):
        sglang_layer_ids(layers)
