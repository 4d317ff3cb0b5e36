"""pipeline.target: the one reading of a target's config, weight map and capture layers that
extraction, training, evaluation, export and the SGLang dump hook share."""

from __future__ import annotations

import json

import pytest

from pipeline.program_edge import BadInput
from pipeline.target.config import TargetError, capture_layers, read_config, sglang_layer_ids, text_config
from pipeline.target.weights import FingerprintError, target_fingerprint, weight_files, weight_map


@pytest.mark.parametrize(("layers", "ours", "sglang"), [(7, [2, 3, 4], [1, 2, 3]), (32, [2, 16, 29], [1, 15, 28]),
                                                         (61, [2, 30, 58], [1, 29, 57])])
def test_capture_layers_in_our_numbering_and_sglangs(layers, ours, sglang):
    assert capture_layers(layers) == ours
    assert sglang_layer_ids(layers) == sglang  # what export writes as eagle_aux_hidden_state_layer_ids


def test_a_target_too_shallow_for_three_capture_layers_is_refused():
    for ask in (capture_layers, sglang_layer_ids):
        with pytest.raises(TargetError, match="6 decoder layers"):
            ask(6)


def test_text_config_unwraps_a_multimodal_config_and_keeps_a_plain_one():
    inner = {"num_hidden_layers": 61, "hidden_size": 7168}
    assert text_config({"model_type": "kimi_k25", "text_config": inner}) is inner
    plain = {"num_hidden_layers": 8}
    assert text_config(plain) is plain
    assert text_config({"text_config": "not a dict", "hidden_size": 4})["hidden_size"] == 4


def test_read_config_names_the_file_and_is_the_edges_bad_input(tmp_path):
    with pytest.raises(BadInput, match=f"{tmp_path / 'config.json'}: missing; --target must be"):
        read_config(tmp_path, "--target")
    (tmp_path / "config.json").write_text("{torn")
    with pytest.raises(BadInput, match="not valid JSON"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(BadInput, match="config.json: expected a JSON object, got list"):
        read_config(tmp_path)


def test_weight_map_reads_the_index_once_for_every_caller(tmp_path):
    assert weight_map(tmp_path) is None  # no index: one file, or not safetensors
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors"}}))
    assert weight_map(tmp_path) == {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors"}
    with pytest.raises(FingerprintError, match="s1.safetensors, which does not exist"):
        weight_files(tmp_path)
    for name in ("s1.safetensors", "s2.safetensors"):
        (tmp_path / name).write_bytes(b"\0" * 8)
    assert [p.name for p in weight_files(tmp_path)] == ["s1.safetensors", "s2.safetensors"]
    index.write_text(json.dumps({"weights": {}}))
    with pytest.raises(FingerprintError, match=f"{index}: no usable weight_map"):
        weight_map(tmp_path)
    with pytest.raises(FingerprintError):
        target_fingerprint(tmp_path)
