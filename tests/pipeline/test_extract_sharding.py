"""Two ranks write one store: each its own share, and the last to finish leaves a single
complete manifest.jsonl."""

from __future__ import annotations

import json

import torch


def test_two_ranks_fill_one_store_and_the_last_completes_the_manifest(tmp_path, tiny_target, tiny_data,
                                                                      reference_store, run_extract, xt):
    out = tmp_path / "store"
    total = len(tiny_data.records)
    first = run_extract(tiny_target, tiny_data.path, out, "--rank", "1", "--world-size", "2")
    assert first.returncode == 0, first.stderr
    assert "other ranks" in first.stdout
    assert not (out / "manifest.jsonl").exists()
    part = [json.loads(x) for x in (out / "manifest.rank1.jsonl").read_text().splitlines()]
    assert sorted(e["index"] for e in part) == list(range(1, total, 2))

    # The second rank comes from torchrun's environment rather than flags.
    second = run_extract(tiny_target, tiny_data.path, out, env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert second.returncode == 0, second.stderr
    assert "store complete" in second.stdout
    assert not list(out.glob("manifest.rank*.jsonl"))
    assert xt.store_files(out) == xt.store_files(reference_store)
    # Other batch companions change float noise, so the checksums differ; the rest matches.
    got = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in (reference_store / "manifest.jsonl").read_text().splitlines()]
    assert [dict(e, xxh3=None) for e in got] == [dict(e, xxh3=None) for e in want]
    assert all(len(e["xxh3"]) == 16 for e in got)
    assert json.loads((out / "meta.json").read_text())["world_size"] == 2
    a, b = xt.load_store(out), xt.load_store(reference_store)
    for name in b:
        for key in b[name]:
            # Other batch companions, so float noise only.
            torch.testing.assert_close(a[name][key], b[name][key], rtol=1e-5, atol=1e-5)
