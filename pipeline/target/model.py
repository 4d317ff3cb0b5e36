"""The target loaded to run it, one way for every stage that does: extraction's forward pass,
evaluation's verifier and regeneration's answers.

`config.py` beside it reads the target's facts from its files with the stdlib only; loading the weights
needs torch and transformers, so it lives here, where a stage that runs the target asks for it
and no other stage's code comes with it. One loader means one attention implementation
(SDPA), one placement on a GPU (`device_map` when accelerate is there, else a move) and one
error, naming the folder, when the weights will not load (a missing or unknown config, a
weight file cut short or damaged) or leave a tensor of the model random (one the weights lack
or hold in another shape).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from pipeline.program_edge import BadInput


def load_target(model_dir: Path, device: str, dtype: torch.dtype, flag: str = "--model") -> Any:
    """The target for inference (a transformers causal LM, whose config and base model are
    read by attribute: typed Any); BadInput naming `model_dir` (as the operator's `flag` named
    it) when transformers cannot load it."""
    import transformers
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    kwargs: dict = {"dtype": dtype, "attn_implementation": "sdpa"}
    on_gpu = device != "cpu"
    if on_gpu and importlib.util.find_spec("accelerate") is not None:
        kwargs["device_map"] = {"": device}
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), output_loading_info=True,
                                                           ignore_mismatched_sizes=True, **kwargs)
        model, info = loaded  # with output_loading_info, the model and what loading found
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        raise BadInput(f"cannot load the target from {model_dir} ({flag}): {str(e).splitlines()[0]}") from None
    _refuse_random_tensors(model_dir, flag, info)
    if on_gpu and "device_map" not in kwargs:
        model.to(device)
    return model.eval()


def _refuse_random_tensors(model_dir: Path, flag: str, info: dict) -> None:
    """A tensor the model needs that the weights lack, or hold in another shape, would be left
    as initialised: random, and silent at the error verbosity set above (a target with one
    MLP removed trained online with exit 0). Refused, naming the first such tensor."""
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)
    missing = sorted(info.get("missing_keys") or ())
    if mismatched:
        key, stored, wanted = mismatched[0]
        raise BadInput(f"{model_dir} ({flag}): the weights hold {key} as {list(stored)}, its config.json describes "
                       f"{list(wanted)} ({len(mismatched)} tensor(s) differ); these weights are not this config's "
                       "model")
    if missing:
        raise BadInput(f"{model_dir} ({flag}): the weights lack {missing[0]} ({len(missing)} tensor(s) in all), which "
                       "would run as random numbers; the download is incomplete or these weights are not this "
                       "config's model")
