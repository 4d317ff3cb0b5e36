"""The target model's facts, read one way for every stage: its config and where EAGLE-3
captures its hidden states.

Extraction, training, evaluation, export and the SGLang dump hook all describe the same
target; each asking this module means a multimodal config (the language model nested under
`text_config`), a sharded checkpoint (`model.safetensors.index.json`) or the capture layers
cannot be read one way by the extractor and another by the exporter. Stdlib only: the hook
runs inside the SGLang server, and the console-side checks must not pull torch in.

- `read_config(model_dir)`: config.json as saved; `text_config(cfg)`: its language-model
  part (the one unwrapping of `text_config`).
- `capture_layers(L)`: the capture points in our numbering, the inputs of decoder layers
  [2, L//2, L-3] (HF hidden_states indices, what a store's meta.json records);
  `sglang_layer_ids(L)`: the same points in SGLang's numbering, [1, L//2-1, L-4], what
  export writes as `eagle_config.eagle_aux_hidden_state_layer_ids`.
- The weights (their files, their fingerprint) are weights.py's.

Errors are `TargetError` (the edge's `BadInput`, exit 2) naming the file or key and what to do;
stages let them through to their edge as they are.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.jsonfile import read_object
from pipeline.program_edge import BadInput

CONFIG = "config.json"
MIN_LAYERS = 7
"""Fewer decoder layers than this leave no three distinct capture layers."""


class TargetError(BadInput):
    """The target folder cannot be used as it is; the text names the file or key."""


def read_config(model_dir: Path | str, flag: str = "the target") -> dict:
    """The target's config.json as saved; BadInput naming the file when it is missing, not a
    regular file, not JSON or not an object. `flag` is how the operator named the folder."""
    path = Path(model_dir) / CONFIG
    return read_object(path, f"{path}: missing; {flag} must be the target's save_pretrained folder")


def text_config(cfg: dict) -> dict:
    """The language-model part of a target config: multimodal targets nest it under
    `text_config` (layers, widths, vocabulary, rope), plain ones are it."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) else cfg


def capture_layers(num_layers: int) -> list[int]:
    """EAGLE-3's capture points as HF hidden_states indices: the inputs of decoder layers
    2, L//2 and L-3 (docs/internals.md, "Hidden-state store"). Extraction stores them,
    evaluation hooks them and the SGLang dump checks the server captures them."""
    if num_layers < MIN_LAYERS:
        raise TargetError(f"target has {num_layers} decoder layers; EAGLE-3 captures layers 2, L//2 and L-3, "
                          f"which are three distinct layers only from {MIN_LAYERS} layers on")
    return [2, num_layers // 2, num_layers - 3]


def sglang_layer_ids(num_layers: int) -> list[int]:
    """The capture points in SGLang's numbering ([1, L//2-1, L-4]), what export writes as
    eagle_config.eagle_aux_hidden_state_layer_ids: SGLang's id i names the output of
    decoder layer i, the input of layer i+1 (its set_eagle3_layers_to_capture adds 1)."""
    return [i - 1 for i in capture_layers(num_layers)]
