"""The check of an exported drafter folder, from its bytes: every name SGLang maps, the
safetensors data offsets tiling the file, every tensor finite, the checksum manifest and, given
the target, that the folder fits it. Export runs it on what it has just written, and
`--verify` on a folder an operator names."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.checksum import ALGO
from pipeline.drafter.config import EXPORT_KEYS, DrafterConfig, DrafterConfigError
from pipeline.export.folder import (
    ARCHITECTURE,
    CONFIG_FILE,
    CONFIG_KEYS,
    DTYPE_BYTES,
    MANIFEST_FILE,
    ROPE_KEYS,
    WEIGHTS_FILE,
    file_entry,
    fingerprint_or_none,
    safetensors_layout,
    target_text_config,
)
from pipeline.jsonfile import read_object
from pipeline.program_edge import BadInput
from pipeline.target.config import sglang_layer_ids


def tiling_problems(path: Path, header: dict, start: int, size: int) -> list[str]:
    """The tensors' data offsets must cover the data section exactly, each span its shape's
    bytes: a cut or padded file fails here before any tensor is read."""
    spans = []
    for name, e in header.items():
        try:
            b, end = (int(x) for x in e["data_offsets"])
            numel = 1
            for d in e["shape"]:
                numel *= int(d)
            width = DTYPE_BYTES[e["dtype"]]
        except (KeyError, TypeError, ValueError):
            return [f"{path}: {name} has no usable dtype, shape and data_offsets; the file is damaged"]
        if end - b != numel * width:
            return [f"{path}: {name} spans {end - b} bytes, its shape and dtype need {numel * width}"]
        spans.append((b, end, name))
    pos = 0
    for b, end, name in sorted(spans):
        if b != pos:
            return [f"{path}: {name} starts at data byte {b}, expected {pos} (a gap or an overlap); the file is damaged"]
        pos = end
    if start + pos != size:
        return [f"{path}: is {size} bytes, its header describes {start + pos}; the file is cut or padded "
                "(export it again)"]
    return []


NONFINITE_BITS = {"BF16": ("<u2", 0x7F80), "F16": ("<u2", 0x7C00), "F32": ("<u4", 0x7F800000),
                  "F64": ("<u8", 0x7FF0000000000000)}
"""Each floating dtype's exponent bits, read as an unsigned integer of its width: an IEEE value is
NaN or Inf exactly when they are all set. Bits, because numpy has no bfloat16."""


def nonfinite_problems(path: Path, header: dict, start: int) -> list[str]:
    """Every floating tensor read from its tiled span (memory: the largest tensor) and checked
    finite. numpy, not torch: `--verify` runs as a pre-flight check before each evaluation,
    where starting torch would cost seconds of a core."""
    import numpy as np

    bad = []
    try:
        with open(path, "rb") as f:
            for name in sorted(header):
                kind, mask = NONFINITE_BITS.get(header[name]["dtype"], (None, 0))
                if kind is None:
                    continue
                b, end = (int(x) for x in header[name]["data_offsets"])
                f.seek(start + b)
                bits = np.frombuffer(f.read(end - b), dtype=kind)
                n = int(np.count_nonzero((bits & np.array(mask, dtype=kind)) == mask))
                if n:
                    bad.append(f"{path}: {name} holds {n} NaN or Inf values; export an earlier checkpoint")
    except (OSError, ValueError) as e:
        return [f"{path}: tensors cannot be read ({e})"]
    return bad


def manifest_problems(folder: Path) -> tuple[list[str], dict | None]:
    path = folder / MANIFEST_FILE
    try:
        manifest = read_object(path, f"{path}: missing; no checksum manifest: the folder was not written by this "
                                     "export; export again")
    except BadInput as e:
        return [str(e)], None
    files = manifest.get("files")
    if not isinstance(files, dict) or WEIGHTS_FILE not in files or CONFIG_FILE not in files:
        return [f"{path}: does not list {WEIGHTS_FILE} and {CONFIG_FILE}; export again"], manifest
    problems = []
    for name, want in files.items():
        if not isinstance(name, str) or "/" in name or not isinstance(want, dict):
            problems.append(f"{path}: entry {name!r} is not a file of this folder")
            continue
        f = folder / name
        try:
            have = file_entry(f)
        except OSError as e:
            problems.append(f"{f}: cannot be read ({e.strerror or e})")
            continue
        if have["bytes"] != want.get("bytes"):
            problems.append(f"{f}: is {have['bytes']} bytes, the manifest recorded {want.get('bytes')!r}")
        elif have[ALGO] != want.get(ALGO):
            problems.append(f"{f}: checksum {have[ALGO]} differs from the manifest's {want.get(ALGO)!r}; "
                            "the file changed after export")
    return problems, manifest


def shape_problems(cfg: dict, header: dict, weights: Path, where: Path) -> list[str]:
    """config.json against the tensors' shapes: a manifest resealed over a lying config.json
    does not make the lie pass."""
    try:
        dcfg = DrafterConfig.from_sglang(cfg, where=str(where))
    except DrafterConfigError as e:
        return [str(e)]
    return dcfg.shape_problems({k: e.get("shape") for k, e in header.items() if isinstance(e, dict)}, weights, where)


def target_problems(cfg: dict, target_cfg: dict, where: Path, target: Path) -> list[str]:
    """config.json against the drafter training builds for this target (DrafterConfig.unlike_target)."""
    try:
        unlike = DrafterConfig.from_sglang(cfg, where=str(where)).unlike_target(target_cfg, f"{target}/config.json")
    except DrafterConfigError:
        return []  # said by shape_problems, or the target's own refusal elsewhere
    return [f"{where}: {key} is {mine!r}, but a drafter of the target {target} has {theirs!r}; export it for this target"
            for key, mine, theirs in unlike]


def verify_folder(folder: Path, target: Path | None = None) -> list[str]:
    """Problems of an exported folder, one line each (empty: SGLang can load it)."""
    folder = Path(folder)
    problems: list[str] = []
    weights = folder / WEIGHTS_FILE
    try:
        header, start, size = safetensors_layout(weights)
        cfg_path = folder / CONFIG_FILE
        cfg = read_object(cfg_path, f"{cfg_path}: missing; not an exported drafter folder")
    except BadInput as e:
        return [str(e)]
    tiling = tiling_problems(weights, header, start, size)
    problems += tiling
    missing = [k for k in EXPORT_KEYS if k not in header]
    if missing:
        problems.append(f"{weights}: lacks {', '.join(missing)}")
    extra = sorted(set(header) - set(EXPORT_KEYS))
    if extra:
        problems.append(f"{weights}: names SGLang's loader does not map: {', '.join(extra[:8])}")
    if cfg.get("architectures") != [ARCHITECTURE]:
        problems.append(f"{folder / CONFIG_FILE}: architectures is {cfg.get('architectures')!r}, not [{ARCHITECTURE!r}]")
    if cfg.get("num_hidden_layers") != 1:
        problems.append(f"{folder / CONFIG_FILE}: num_hidden_layers is {cfg.get('num_hidden_layers')!r}, not 1")
    absent = [k for k in CONFIG_KEYS if k not in cfg]
    if absent:
        problems.append(f"{folder / CONFIG_FILE}: lacks {', '.join(absent)}")
    if not any(k in cfg for k in ROPE_KEYS):
        problems.append(f"{folder / CONFIG_FILE}: no rope setting ({', '.join(ROPE_KEYS)})")
    problems += shape_problems(cfg, header, weights, folder / CONFIG_FILE)
    if not tiling:
        problems += nonfinite_problems(weights, header, start)
    found, manifest = manifest_problems(folder)
    problems += found
    if target is not None:
        try:
            t = target_text_config(target)
            want = sglang_layer_ids(int(t.get("num_hidden_layers") or 0))
        except BadInput as e:
            return problems + [str(e)]
        got = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if got != want:
            problems.append(f"{folder / CONFIG_FILE}: eagle_aux_hidden_state_layer_ids is {got!r}; the target's "
                            f"{t.get('num_hidden_layers')} layers need {want}")
        for key in ("vocab_size", "max_position_embeddings", *ROPE_KEYS):
            if t.get(key) is not None and cfg.get(key) != t.get(key):
                problems.append(f"{folder / CONFIG_FILE}: {key} is {cfg.get(key)!r}, the target's is {t.get(key)!r}")
        problems += target_problems(cfg, t, folder / CONFIG_FILE, target)
        recorded = (manifest or {}).get("target_fingerprint")
        if recorded:
            have, why = fingerprint_or_none(target)
            if have != recorded:
                problems.append(f"{folder / MANIFEST_FILE}: exported for the target weights {recorded}, but "
                                f"--target {target} holds {have or 'none (' + why + ')'}; export for this target")
    return problems


def run(folder: Path, target: Path | None) -> int:
    """`pipeline.export --verify`: each problem on a line of stderr and 1, or what the folder
    holds and 0."""
    problems = verify_folder(folder, target)
    for line in problems:
        print(f"export: {line}", file=sys.stderr)
    if not problems:
        print(f"export: {folder} is complete: {len(EXPORT_KEYS)} weights, all finite, checksums "
              f"match{', for this target' if target else ''}; config for SGLang")
    return 1 if problems else 0
