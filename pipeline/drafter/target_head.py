"""Where train's setup still reads the target's tensors from: they are `pipeline.target.tensors`.
Kept only until pipeline/train/setup.py, being reshaped now, imports that module; then removed."""

from pipeline.target.tensors import TargetWeightsError, read_embeddings, read_lm_head

__all__ = ["TargetWeightsError", "read_embeddings", "read_lm_head"]
