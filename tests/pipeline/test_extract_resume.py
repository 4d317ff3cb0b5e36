"""A killed extraction resumes to exactly the store an uninterrupted run writes, and a
resume against another target or dataset is refused."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from dataclasses import replace

import pytest
import torch

from pipeline.records import merge_stats


def _finished_files(out) -> int:
    return len(list(out.glob("rows_*/[0-9]*.safetensors")))


def _mtimes(store) -> dict:
    """Modification times of the store's files, its lock files (touched by any start) aside."""
    return {p: p.stat().st_mtime_ns for p in store.rglob("*") if not p.name.endswith(".lock")}


def _assert_same_store(got, want, xt) -> None:
    assert xt.store_files(got) == xt.store_files(want)
    assert (got / "manifest.jsonl").read_bytes() == (want / "manifest.jsonl").read_bytes()
    a, b = xt.load_store(got), xt.load_store(want)
    for name, tensors in b.items():
        assert a[name].keys() == tensors.keys()
        for key, t in tensors.items():
            assert torch.equal(a[name][key], t), f"{name}:{key} differs"


@pytest.mark.parametrize("seed", [7])
def test_sigkill_at_a_random_point_then_resume_gives_the_uninterrupted_store(
        seed, tmp_path, tiny_target, tiny_data, reference_store, run_extract, xt):
    rng = random.Random(seed)
    out = tmp_path / "store"
    total = len(tiny_data.records)
    # One writer with a delay before each rename (test hook, pipeline/store/sample_file.py): files land
    # >= 50 ms apart, so by the 12th the manifest has had a timed flush. Writer count does not
    # change batching, so the store must still equal the reference bit for bit.
    argv = xt.extract_argv(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats), "--writers", "1")
    env = xt.cli_env(EAGLE3_EXTRACT_WRITE_DELAY="0.05")
    proc = subprocess.Popen(argv, cwd=xt.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    kill_after = rng.randint(12, total - 6)
    deadline = time.monotonic() + 90
    while _finished_files(out) < kill_after and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # wait-ok: poll interval of a deadline loop
    time.sleep(rng.uniform(0, 0.04))
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    done = {json.loads(x)["index"] for x in (out / "manifest.jsonl").read_text().splitlines() if x.strip()}
    assert 0 < len(done) < total
    # A file the manifest does not list must be rewritten, not trusted.
    stray = min(set(range(total)) - done)
    (out / f"rows_0/{stray}.safetensors").write_bytes(b"not a safetensors file")
    # A line torn by the kill is ignored.
    with open(out / "manifest.jsonl", "ab") as f:
        f.write(b'{"index": 999, "id": "tor')

    resumed = run_extract(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done)} already in the manifest" in resumed.stdout
    _assert_same_store(out, reference_store, xt)


def test_ctrl_c_mid_run_exits_130_keeps_the_manifest_and_the_rerun_completes(
        tmp_path, tiny_target, tiny_data, reference_store, run_extract, xt):
    out = tmp_path / "store"
    total = len(tiny_data.records)
    argv = xt.extract_argv(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats), "--writers", "1")
    proc = subprocess.Popen(argv, cwd=xt.REPO, env=xt.cli_env(EAGLE3_EXTRACT_WRITE_DELAY="0.05"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while _finished_files(out) < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # wait-ok: poll interval of a deadline loop
    assert proc.poll() is None, "the run finished before Ctrl-C could land"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)

    assert proc.returncode == 130, err
    assert "extract: interrupted; rerun the same command to resume" in err and "Traceback" not in err, err
    from pipeline.store.manifest import read_manifest

    done = set(read_manifest(out))
    assert len(done) < total
    resumed = run_extract(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done)} already in the manifest" in resumed.stdout
    _assert_same_store(out, reference_store, xt)


def test_resume_against_another_dataset_or_target_is_refused(tmp_path, tiny_target, tiny_data, reference_store,
                                                             run_extract, xt):
    records = xt.make_records(len(tiny_data.records))
    records[0]["input_ids"][0] = (records[0]["input_ids"][0] + 1) % xt.VOCAB
    other_data = xt.write_merged(tmp_path / "other.jsonl", records)
    before = _mtimes(reference_store)

    proc = run_extract(tiny_target, other_data, reference_store)
    assert proc.returncode == 2
    assert "dataset_sha256" in proc.stderr and "meta.json" in proc.stderr
    assert "Traceback" not in proc.stderr

    other_target = xt.save_tiny_llama(tmp_path / "other-target", seed=3)
    proc = run_extract(other_target, tiny_data.path, reference_store)
    assert proc.returncode == 2
    assert "target_fingerprint" in proc.stderr and str(other_target) in proc.stderr
    assert _mtimes(reference_store) == before


def test_bad_dataset_record_is_refused_naming_file_line_and_key(tmp_path, tiny_target, tiny_data, run_extract, xt):
    records = xt.make_records(4)
    records[2]["loss_mask"] = records[2]["loss_mask"][:-1]
    data = xt.write_merged(tmp_path / "bad.jsonl", records)
    proc = run_extract(tiny_target, data, tmp_path / "store")
    assert proc.returncode == 2
    assert f"{data}:3:" in proc.stderr and "loss_mask" in proc.stderr
    assert not list((tmp_path / "store").glob("rows_*"))

    proc = run_extract(tiny_target, tiny_data.path, tmp_path / "store2", "--stats", str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "missing.json" in proc.stderr


def test_stats_of_another_dataset_are_refused(tmp_path, tiny_target, tiny_data, run_extract, xt):
    bad = tmp_path / "stale.stats.json"
    merge_stats.write_stats(bad, replace(merge_stats.read_stats(tiny_data.stats), dataset_sha256="0" * 64))
    proc = run_extract(tiny_target, tiny_data.path, tmp_path / "store", "--stats", str(bad))
    assert proc.returncode == 2
    assert "dataset_sha256" in proc.stderr and str(bad) in proc.stderr


def test_a_stop_lands_between_decoder_layers_keeps_the_manifest_and_drops_the_batch_in_flight(
        tmp_path, tiny_target, tiny_data, reference_store, run_extract, xt):
    """On a CPU one batch can take minutes, longer than `eagle3 stop`'s 10 s grace: the SIGTERM
    (here its flag, set while the second batch is inside layer 1) ends the forward before the
    next layer; the first batch stays in the manifest, the second is dropped and said so, and
    a rerun resumes to the uninterrupted store."""
    import threading

    from pipeline.events import EventWriter
    from pipeline.extract import engine
    from pipeline.extract.errors import Stopped
    from pipeline.extract.job import prepare
    from pipeline.extract.options import Options
    from pipeline.extract.sharding import resolve_shard
    from pipeline.store.meta import TargetInfo
    from pipeline.target.model import load_target

    out = tmp_path / "store"
    options = Options(data=tiny_data.path, out=out, stats=tiny_data.stats, batch_tokens=256, writers=1)
    job = prepare(options, TargetInfo.from_dir(tiny_target), "float32", resolve_shard(None, None, env={}))
    assert len(job.todo) >= 3
    model = load_target(tiny_target, "cpu", torch.float32)
    stop = threading.Event()
    forwards = {"layer1": 0, "after_stop": 0}
    blocks = model.base_model.layers

    def in_layer1(module, args, output):  # the signal arrives while the 2nd batch is in layer 1
        forwards["layer1"] += 1
        if forwards["layer1"] == 2:
            stop.set()

    def later_layer(module, args, output):  # a layer that ran to its end after the stop
        if stop.is_set():
            forwards["after_stop"] += 1

    hooks = [blocks[1].register_forward_hook(in_layer1)]
    hooks += [b.register_forward_hook(later_layer) for b in list(blocks)[2:]]
    lines: list[str] = []
    try:
        with pytest.raises(Stopped) as stopped:
            engine.run(job, model, "cpu", EventWriter(tmp_path / "events.jsonl"), log=lines.append, stop=stop)
    finally:
        for h in hooks:
            h.remove()
        if job.lock is not None:
            job.lock.release()
    assert forwards["after_stop"] == 0  # no layer ran after the stop
    first = len(job.todo[0].indices)
    second = len(job.todo[1].indices)
    text = str(stopped.value)
    assert stopped.value.exit_code == 143
    assert f"kept {first} of {len(tiny_data.records)} samples in the manifest" in text, text
    assert f"dropped the batch in flight ({second} samples" in text, text
    listed = [json.loads(x)["index"] for x in (out / "manifest.jsonl").read_text().splitlines() if x.strip()]
    assert sorted(listed) == sorted(job.todo[0].indices)

    resumed = run_extract(tiny_target, tiny_data.path, out, "--stats", str(tiny_data.stats))
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_store(out, reference_store, xt)
