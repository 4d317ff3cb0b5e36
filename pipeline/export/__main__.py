"""`python -m pipeline.export`: a trained drafter checkpoint as a folder SGLang serves.

    python -m pipeline.export --checkpoint TRAIN_OUT|CKPT --target TARGET --out DRAFTER [--dtype target]
    python -m pipeline.export --verify DRAFTER [--target TARGET]

Writes DRAFTER/config.json and DRAFTER/model.safetensors as docs/internals.md "Drafter checkpoint"
fixes them: SGLang's `LlamaForCausalLMEagle3` config with one layer, the target's
`max_position_embeddings` and rope keys copied as the target spells them, and
`eagle_config.eagle_aux_hidden_state_layer_ids = [1, L//2-1, L-4]` (SGLang adds 1: the
inputs of layers 2, L//2, L-3, where extraction captured). The weights carry exactly the
names SGLang's loader maps (pipeline.drafter.EXPORT_KEYS; a test checks them against
llama_eagle3.py of the sglang wheel). SGLang silently keeps a random tensor for a name it
does not find (a missing `lm_head.weight` serves at acceptance 1.00), so a checkpoint that
lacks any of them, or holds one of the wrong shape, is refused before anything is written.
The weights take the target's dtype unless --dtype says otherwise (SGLang's `--dtype auto`
reads a float32 drafter as float16, not the target's bf16); files are 0644 (--mode).
Beside them, `eagle3-export.json` holds every file's size and xxh3 checksum and the
target's weight fingerprint. A checkpoint whose training store names another target's
fingerprint than --target's weights (another depth, a fine-tune, another revision) is refused.

The folder is built under a temporary name and exchanged into place (pipeline.output_guard):
an existing --out is replaced only when an earlier export wrote it (its `.eagle3-writer`
marker); any other existing path, or an --out that is, holds or sits inside the checkpoint
or the target, is refused before anything is touched. A failure leaves no temporary.

--checkpoint takes a training run folder (pipeline.train --out: its checkpoints/latest
pointer names the checkpoint) or one checkpoint folder. --verify reads DRAFTER's bytes:
every required key of the shape config.json describes, the safetensors data offsets tiling
the file to its size, every tensor finite, the checksum manifest; with --target, that the
capture layers and the drafter's shape are the ones training builds for that target and that
its weight fingerprint is the one the drafter was exported for.

Exit codes: 0 written (--verify: the folder is complete), 2 bad input (a missing or
misshapen key, a checkpoint for another target, an --out that is not export's own, bad
arguments), 3 the disk filled (the volume and the bytes needed are named), 1 anything else
(--verify: the folder has problems, each printed on one line), 130 interrupted, 143 stopped by
SIGTERM (the temporary folder is removed; pipeline/program_edge.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipeline import cpu_threads
from pipeline.events import EventWriter
from pipeline.export import verify
from pipeline.export.convert import export
from pipeline.export.options import DTYPES, Options, parse
from pipeline.program_edge import run_stage


def _run(opts: Options) -> int:
    if opts.verify is not None:
        return verify.run(opts.verify, opts.target)  # bytes and JSON: no torch, so no threads to fit
    cpu_threads.fit("export", opts.threads)
    assert opts.checkpoint is not None and opts.target is not None and opts.out is not None  # validate()
    with EventWriter.from_env() as events:
        exported = export(opts.checkpoint, opts.target, opts.out, DTYPES[opts.dtype], events, opts.mode)
    print(exported.line())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    # a stop unwinds through the folder swap, which removes its temporary
    return run_stage("export", argv, parse, _run)


if __name__ == "__main__":
    sys.exit(main())
