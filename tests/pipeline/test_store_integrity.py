"""A store cannot silently rot: a truncated or altered sample fails --verify and is
extracted again on resume, a store is refused for a target whose weights changed in place,
and a second extraction on a busy store is refused with the pid that holds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


def _verify(xt, out, *more):
    argv = [sys.executable, "-m", "pipeline.extract", "--verify", "--out", str(out), *map(str, more)]
    return subprocess.run(argv, cwd=xt.REPO, env=xt.cli_env(), capture_output=True, text=True, timeout=60, check=False)


def _entries(out):
    return [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]


@pytest.fixture
def store_copy(tmp_path, reference_store):
    out = tmp_path / "store"
    shutil.copytree(reference_store, out)
    return out


def test_manifest_lines_carry_size_and_checksum_of_the_file(reference_store):
    from pipeline.checksum import file_checksum

    for e in _entries(reference_store):
        path = reference_store / e["file"]
        assert e["bytes"] == path.stat().st_size
        assert e["xxh3"] == file_checksum(path)


def test_truncated_sample_fails_verify_then_resume_extracts_it_again(store_copy, tiny_target, tiny_data,
                                                                    reference_store, run_extract, xt):
    victim = _entries(store_copy)[7]
    path = store_copy / victim["file"]
    os.truncate(path, 5000)

    proc = _verify(xt, store_copy, "--model", tiny_target)
    assert proc.returncode == 2
    assert str(path) in proc.stdout and "5000 bytes" in proc.stdout and str(victim["bytes"]) in proc.stdout
    report = json.loads(_verify(xt, store_copy, "--json", "--sample", "4").stdout)
    assert report["ok"] is False and report["problem_count"] == 1 and report["samples"] == len(tiny_data.records)

    resumed = run_extract(tiny_target, tiny_data.path, store_copy)
    assert resumed.returncode == 0, resumed.stderr
    assert f"sample {victim['index']} fails the resume check" in resumed.stdout
    assert "store complete" in resumed.stdout
    assert path.read_bytes() == (reference_store / victim["file"]).read_bytes()
    assert (store_copy / "manifest.jsonl").read_bytes() == (reference_store / "manifest.jsonl").read_bytes()
    ok = _verify(xt, store_copy, "--model", tiny_target)
    assert ok.returncode == 0, ok.stdout
    assert "intact" in ok.stdout


def test_altered_content_of_the_same_size_is_caught_by_the_checksum(store_copy, tiny_target, tiny_data,
                                                                    reference_store, run_extract, xt):
    victim = _entries(store_copy)[-1]
    path = store_copy / victim["file"]
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x40  # a bit flip inside the hidden states: same size
    path.write_bytes(bytes(data))

    proc = _verify(xt, store_copy)
    assert proc.returncode == 2
    assert str(path) in proc.stdout and "xxh3" in proc.stdout

    resumed = run_extract(tiny_target, tiny_data.path, store_copy)
    assert resumed.returncode == 0, resumed.stderr
    assert f"sample {victim['index']} fails the resume check" in resumed.stdout
    assert path.read_bytes() == (reference_store / victim["file"]).read_bytes()


def test_incomplete_manifest_fails_verify(store_copy, xt):
    lines = (store_copy / "manifest.jsonl").read_text().splitlines(keepends=True)
    (store_copy / "manifest.jsonl").write_text("".join(lines[:3] + lines[4:]))
    proc = _verify(xt, store_copy)
    assert proc.returncode == 2
    assert "1 of 36 samples missing (indices 3)" in proc.stdout


def test_weights_changed_in_place_are_refused_by_name_but_a_moved_target_resumes(tmp_path, tiny_data, run_extract,
                                                                                 xt):
    target = xt.save_tiny_llama(tmp_path / "target", seed=0)
    out = tmp_path / "store"
    first = run_extract(target, tiny_data.path, out, "--limit", "4")
    assert first.returncode == 0, first.stderr
    fingerprint = json.loads((out / "meta.json").read_text())["target_fingerprint"]
    assert fingerprint.startswith("wfp1:")

    moved = tmp_path / "moved-target"
    shutil.copytree(target, moved)
    again = run_extract(moved, tiny_data.path, out, "--limit", "4")
    assert again.returncode == 0, again.stderr
    assert "nothing left to do" in again.stdout

    xt.save_tiny_llama(target, seed=5)  # same path, same config, other weights
    refused = run_extract(target, tiny_data.path, out, "--limit", "8")
    assert refused.returncode == 2
    assert "target_fingerprint" in refused.stderr and fingerprint in refused.stderr
    assert len(_entries(out)) == 4
    proc = _verify(xt, out, "--model", target)
    assert proc.returncode == 2 and "target_fingerprint" in proc.stdout


def test_a_second_extraction_on_a_busy_store_is_refused_with_the_pid(tmp_path, tiny_target, tiny_data, run_extract):
    from pipeline.store.lock import StoreInUse, StoreLock

    out = tmp_path / "store"
    out.mkdir()
    with StoreLock(out, rank=0, world_size=1):
        proc = run_extract(tiny_target, tiny_data.path, out)
        assert proc.returncode == 2
        assert f"store {out} in use by pid {os.getpid()}" in proc.stderr
        # A rank of a sharded run is refused too: the holder is a run of another world size.
        proc = run_extract(tiny_target, tiny_data.path, out, "--rank", "1", "--world-size", "2")
        assert proc.returncode == 2 and f"in use by pid {os.getpid()}" in proc.stderr
        with pytest.raises(StoreInUse, match=f"in use by pid {os.getpid()}"):
            StoreLock(out).acquire()
        assert not list(out.glob("rows_*")) and not (out / "manifest.jsonl").exists()
    # Released: the next run proceeds.
    proc = run_extract(tiny_target, tiny_data.path, out, "--limit", "2")
    assert proc.returncode == 0, proc.stderr


def test_the_ranks_of_one_sharded_run_share_a_store():
    import tempfile
    from pathlib import Path

    from pipeline.store.lock import StoreLock

    with tempfile.TemporaryDirectory() as d:
        a = StoreLock(Path(d), rank=0, world_size=2).acquire()
        b = StoreLock(Path(d), rank=1, world_size=2).acquire()
        assert a.held and b.held
        a.release()
        b.release()


def test_a_store_of_the_previous_format_is_not_resumed(tmp_path, tiny_target, tiny_data, run_extract):
    out = tmp_path / "store"
    out.mkdir()
    (out / "meta.json").write_text(json.dumps({"format": "eagle3-hidden-store/1", "records": 36}))
    proc = run_extract(tiny_target, tiny_data.path, out)
    assert proc.returncode == 2
    assert "eagle3-hidden-store/1" in proc.stderr and "new --out" in proc.stderr


def test_progress_does_not_count_a_dropped_sample_until_it_is_written_again(tmp_path):
    from pipeline.extract.progress import ManifestTally

    line = '{{"index": {i}, "id": "s{i}", "tokens": 10, "bytes": 100, "file": "rows_0/{i}.safetensors"}}\n'
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(line.format(i=i) for i in range(4)))
    tally = ManifestTally(tmp_path, 4, stale={2})
    tally.refresh()
    assert (tally.done, tally.tokens) == (3, 30)
    with open(manifest, "a") as f:
        f.write(line.format(i=2))
    tally.refresh()
    assert (tally.done, tally.tokens) == (4, 40)
