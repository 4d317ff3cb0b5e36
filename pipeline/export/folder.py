"""What an exported drafter folder holds, read one way by the export that writes it
(convert.py) and the check that reads it back (verify.py): its files, the names SGLang reads,
the safetensors layout and the checksum of each file."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from pipeline.checksum import ALGO, file_checksum
from pipeline.program_edge import BadInput
from pipeline.target.config import read_config, text_config
from pipeline.target.weights import FingerprintError, target_fingerprint

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ARCHITECTURE = "LlamaForCausalLMEagle3"
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")
# Keys SGLang reads from the draft's config.json (checked against the wheel in tests).
CONFIG_KEYS = ("architectures", "model_type", "num_hidden_layers", "hidden_size", "intermediate_size",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "draft_vocab_size",
               "rms_norm_eps", "hidden_act", "tie_word_embeddings", "max_position_embeddings", "eagle_config")
MANIFEST_FILE = "eagle3-export.json"
WRITER = "pipeline.export"
SAFETENSORS_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
                      "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
MAX_HEADER_BYTES = 100 << 20


def target_text_config(target: Path) -> dict:
    return text_config(read_config(target, "--target"))


def fingerprint_or_none(target: Path) -> tuple[str | None, str]:
    try:
        return target_fingerprint(target), ""
    except FingerprintError as e:
        return None, str(e)


def file_entry(path: Path) -> dict:
    return {"bytes": path.stat().st_size, ALGO: file_checksum(path)}


def safetensors_layout(path: Path) -> tuple[dict, int, int]:
    """(header without __metadata__, data start, file size) of a safetensors file, tensors unread."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) != 8:
                raise BadInput(f"{path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise BadInput(f"{path}: header of {n} bytes does not fit the file's {size} bytes; the file is damaged")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise BadInput(f"{path}: missing") from None
    except ValueError as e:
        raise BadInput(f"{path}: header is not JSON ({e}); the file is damaged") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: header is not a JSON object; the file is damaged")
    header.pop("__metadata__", None)
    return header, 8 + n, size
