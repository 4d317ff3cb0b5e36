"""Hidden-state extraction: the target's capture layers and final state, per sample, on disk.

Store layout (DESIGN.md section 2), as readers (training, checks) see it:

    <out>/meta.json                         target, layers, hidden size, capture layers, dtype, dataset sha256
    <out>/manifest.jsonl                    one line per finished sample: index, id, tokens, bytes, file
    <out>/rows_<k>/<index>.safetensors      input_ids, loss_mask, hidden_state, aux_hidden_state

A finished store has exactly one `manifest.jsonl`, sorted by index. While a sharded run is
in flight each rank appends to `manifest.rank<r>.jsonl`; call `read_manifest(out)` to see
every finished sample of all ranks at once (manifest.py says how the parts are merged).
Only samples in the manifest are finished: a sample file without a manifest line is
incomplete work that a resume rewrites.
"""

from __future__ import annotations

from .manifest import read_manifest

__all__ = ["read_manifest"]
