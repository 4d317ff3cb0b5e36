"""`pipeline.extract --verify`: the store at --out read as training will read it
(pipeline/store/integrity.py), each problem on a line, and an exit code that says whether it is intact."""

from __future__ import annotations

import json

from pipeline.extract.options import Options
from pipeline.program_edge import BAD_INPUT, OK
from pipeline.store.integrity import verify_store


def run(opts: Options) -> int:
    """0 for an intact store, 2 (as train refuses such a sample) for one with problems."""
    assert opts.out is not None  # validate(): --verify needs --out
    mode = "all" if opts.sample is None else "sample"
    report = verify_store(opts.out, model=opts.model, checksums=mode, sample=opts.sample or 0)
    if opts.json:
        print(json.dumps(report.to_json()))
    else:
        for line in report.problems:
            print(f"verify: {line}", flush=True)
        print(f"verify: {report.summary()}", flush=True)
    return OK if report.ok else BAD_INPUT
