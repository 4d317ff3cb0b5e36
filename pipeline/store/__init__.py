"""The hidden-state store: the target's capture layers and final state, per sample, on disk.

The contract between the stages: extraction (both backends) writes it, training, evaluation
and the console's checks read it, so it lives beside them rather than inside the extractor.

Store layout (docs/internals.md, "Hidden-state store"), as readers (training, checks) see it:

    <out>/meta.json                         format, target (path, informational), target_fingerprint,
                                            layers, hidden size, capture layers, dtype, dataset sha256,
                                            records, limit
    <out>/manifest.jsonl                    one line per finished sample:
                                            {"index","id","tokens","bytes","file","xxh3"}
    <out>/rows_<k>/<index>.safetensors      input_ids, loss_mask, hidden_state, aux_hidden_state
                                            (an fp8 store: the states as e4m3 and their scales
                                            hidden_state_scale, aux_hidden_state_scale; fp8.py)
    <out>/.extract.rank<r>.lock             held (flock) by the process writing as rank r

API for writers and readers of the store (all but `sample_file` are torch-free):
- `sample_file.write_sample(out, Sample, hidden) -> dict`: writes one sample atomically and
  returns its manifest line; append it with `manifest.ManifestWriter.add(line)`.
  `sample_file.write_parts` is the routine under it, for a writer that streams the tensors' bytes
  (the SGLang client moves a dump through it chunk by chunk); the file and line are the same.
- `lock.StoreLock(out, rank, world_size).acquire()`: one extraction per store;
  raises `StoreInUse` ("store OUT in use by pid N").
- `meta.TargetInfo`, `meta.build_meta`, `meta.ensure_meta`: meta.json, and the refusal to
  resume a store with another target, dataset or dtype.
- `pipeline.target.target_fingerprint(model_dir) -> "wfp1:<hex>"`: the
  target's identity by its weights, as meta.json's `target_fingerprint`.
- `integrity.verify_store(out, model=None, checksums="sample"|"all"|"none", sample=64)
  -> StoreReport` (`.ok`, `.problems`, `.to_json()`): what `--verify` runs; a trainer
  calls it before it trusts a store.
- `pipeline.checksum.file_checksum(path)`: a sample file's xxh3, as in its manifest line.
- `fp8.as_captured(tensors, dtype)`: an fp8 sample's states as captured (dequantized);
  `fp8.quantize` / `fp8.dequantize` are the arithmetic under it.
- `meaning.LayoutOf.of_meta(meta)`, `meaning.check_header(path, tokens, layout)`,
  `meaning.rows_problem(arrays, layout)`, `meaning.check_file(...)`: what a sample must mean
  beyond its bytes (its header the store's, its values states); `--verify` and the trainer's
  read ask it of every sample they read.

A finished store has exactly one `manifest.jsonl`, sorted by index. While a sharded run is
in flight each rank appends to `manifest.rank<r>.jsonl`; call `read_manifest(out)` to see
every finished sample of all ranks at once (manifest.py says how the parts are merged).
Only samples in the manifest are finished: a sample file without a manifest line is
incomplete work that a resume rewrites.

Errors are the stage edge's (pipeline/program_edge.py): `BadInput` (exit code 2: the store on
disk or the target does not fit the run) and `StageError` (1), whatever stage meets them.
"""

from __future__ import annotations

from pipeline.store.manifest import read_manifest

__all__ = ["read_manifest"]
