"""The disk reserve stops a run cleanly (exit 3, a message saying what to do) and the
same command resumes it once space is free."""

from __future__ import annotations

import json

import torch


def test_reserve_stops_cleanly_mid_run_and_the_rerun_completes(tmp_path, tiny_target, tiny_data, reference_store,
                                                               run_extract, xt):
    out = tmp_path / "store"
    events = tmp_path / "events.jsonl"
    reserve = 10_000_000
    # The volume "has" the reserve plus room for a few samples (test hook, see pipeline/extract/reserve.py).
    room = 250_000
    proc = run_extract(tiny_target, tiny_data.path, out, "--reserve", str(reserve),
                       env={"EAGLE3_EXTRACT_FAKE_FREE": str(reserve + room), "EAGLE3_EVENTS": str(events)})
    assert proc.returncode == 3, proc.stderr
    msg = proc.stderr
    assert "disk reserve" in msg and "rerun the same command to resume" in msg
    assert "10.0 MB" in msg and "free" in msg
    written = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert 0 < len(written) < len(tiny_data.records)
    assert sum(e["bytes"] for e in written) <= room
    assert "Traceback" not in msg
    messages = [json.loads(x) for x in events.read_text().splitlines() if '"message"' in x]
    assert messages and "disk reserve" in messages[-1]["text"]

    proc = run_extract(tiny_target, tiny_data.path, out, "--reserve", "1MB")
    assert proc.returncode == 0, proc.stderr
    assert xt.store_files(out) == xt.store_files(reference_store)
    assert (out / "manifest.jsonl").read_bytes() == (reference_store / "manifest.jsonl").read_bytes()
    got, want = xt.load_store(out), xt.load_store(reference_store)
    assert all(torch.equal(got[n][k], want[n][k]) for n in want for k in want[n])


def test_reserve_above_free_space_refuses_before_writing(tmp_path, tiny_target, tiny_data, run_extract):
    out = tmp_path / "store"
    proc = run_extract(tiny_target, tiny_data.path, out, "--reserve", "1000PB")
    assert proc.returncode == 3
    assert "disk reserve" in proc.stderr and "(--reserve)" in proc.stderr
    assert not list(out.glob("rows_*")) and not (out / "manifest.jsonl").exists()
