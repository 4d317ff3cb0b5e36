"""`python -m pipeline.extract`: capture a target's hidden states into the store, or
estimate how many bytes that will take.

    python -m pipeline.extract --backend hf --model TARGET --data MERGED.jsonl --out STORE [--store-dtype fp8] [...]
    python -m pipeline.extract --estimate --model TARGET --stats STATS.json [--dtype bf16] [--store-dtype fp8]
        [--json] [--limit N [--data DATASET]]
    python -m pipeline.extract --verify --out STORE [--model TARGET] [--sample N] [--json]
    python -m pipeline.extract --backend sglang --server URL --dump-dir DIR --model TARGET --data MERGED.jsonl --out STORE

Exit codes: 0 done (or this rank's share done; --verify: the store is intact), 2 bad input
(also: "store STORE in use by pid N", another extraction writes to it; --verify: the store
has problems, each printed on one line, as train refuses such a sample with 2), 3 stopped by
the disk reserve or a full disk (free space and rerun to resume), 1 anything else, 4 (--backend sglang) the server is
unreachable or failed --max-failures requests in a row: restart it and rerun to resume
(pipeline/extract/sglang_client.py), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (the
manifest is kept; rerun to resume). The codes and the `extract: error: ...` line are the
stage edge's (pipeline/program_edge.py); the run itself is driver.py's, whichever backend.

--verify checks every sample's size, header, checksum and values (with --sample N: the
checksums and values of N random ones and the last N written, and it says how many it did
not read), that the manifest lists every sample, and with --model that the target's weights
are those the store was written with (pipeline/store/integrity.py). The header must be the
one meta.json declares and the values must mean states (pipeline/store/meaning.py: finite,
fp8 scales in range), so a sample rewritten with its manifest line resealed is still found;
each problem names the file, the sample and the key. --json prints StoreReport.to_json():
{"ok", "out", "expected", "samples", "tokens", "bytes", "sizes_checked", "checksums_checked",
"headers_checked", "values_checked", "target_fingerprint", "model_fingerprint",
"store_dtype", "problems", "problem_count"}.

--store-dtype fp8 stores the final and aux states as float8 e4m3 with float32 scales, one
per token for the final state and one per token per capture layer for aux: about half the
bytes of bf16 (1 byte a value and 16 bytes of scales a token against 2 bytes a value).
Training, --verify and the checksums read such a store as they read any; the trainer gets
the states dequantized to the dtype they were captured in (pipeline/store/fp8.py says why
per layer for aux, docs/train.md "fp8 store" what it costs in acceptance).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipeline.extract import estimate, hf_backend, verify
from pipeline.extract.driver import RESUME
from pipeline.extract.options import Options, parse
from pipeline.extract.reserve import disk_full, is_disk_full
from pipeline.program_edge import run_program


def _run(opts: Options) -> int:
    if opts.verify:
        return verify.run(opts)
    if opts.estimate:
        return estimate.run(opts)
    if opts.backend == "sglang":
        from pipeline.extract.sglang_client import extract

        return extract(opts)
    return hf_backend.extract(opts)


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        opts = parse(argv)
        opts.validate()
        try:
            return _run(opts)
        except OSError as e:
            if is_disk_full(e):
                raise disk_full(e, "writing the store", opts.out) from None
            raise

    return run_program("extract", body, stop_note=RESUME)


if __name__ == "__main__":
    sys.exit(main())
