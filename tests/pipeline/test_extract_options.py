"""Extraction refuses, per mode, what its run cannot use: one line naming the flag and exit 2,
before a model or a dataset is read and before the store folder is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.extract.__main__ import main

RUN = ["--model", "m", "--data", "d.jsonl", "--out", "store"]
SGLANG = [*RUN, "--backend", "sglang", "--server", "http://127.0.0.1:9", "--dump-dir", "dumps"]

CASES = [
    (["--verify"], "missing --out; see python -m pipeline.extract --help"),
    (["--verify", "--out", "store", "--sample", "0"], "--sample must be at least 1, got 0"),
    (["--estimate", "--model", "m"], "missing --stats"),
    (["--model", "m", "--data", "d.jsonl"], "missing --out"),
    ([*RUN, "--backend", "sglang"], "missing --server, --dump-dir (needed by --backend sglang)"),
    ([*RUN, "--writers", "0"], "--writers must be at least 1, got 0"),
    ([*RUN, "--limit", "-1"], "--limit must not be negative, got -1"),
    ([*RUN, "--reserve", "lots"], "--reserve: 'lots' is not a size"),
    ([*SGLANG, "--concurrency", "2000"], "--concurrency must be at most 1024, got 2000"),
    ([*SGLANG, "--writers", "65"], "--writers must be at most 64, got 65"),
    ([*SGLANG, "--request-timeout", "0"], "--request-timeout must be between 0 and 86400 seconds, got 0"),
    ([*SGLANG, "--dump-budget", "10"], "--dump-budget must be more than 4096 bytes, got 10"),
    ([*SGLANG, "--dump-budget", "lots"], "--dump-budget: 'lots' is not a size"),
]


@pytest.mark.parametrize(("argv", "words"), CASES, ids=[c[1][:40] for c in CASES])
def test_a_refused_extraction_is_one_line_and_exit_2_before_anything_is_made(tmp_path, monkeypatch, capsys, argv,
                                                                             words):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("extract: error: ") and words in err[0], err
    assert list(Path(tmp_path).iterdir()) == []
