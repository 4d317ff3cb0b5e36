"""The trainer tells the truth and learns: it overfits a handful of samples, validates on a
held-out slice it never trains on, chooses the draft vocabulary over the merged dataset and
reports its coverage on held-out records, keeps the whole run's history across a resume,
extends a finished run, and stops mid-step within a stop's grace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from stage_call import call_stage

from pipeline.events import iter_events
from pipeline.records.train_summary import read_summary

SHARP = 30.0  # the tiny target's lm_head scaled up: peaked distributions, so top-1 agreement is learnable


@pytest.fixture(scope="module")
def sharp(tmp_path_factory, xt):
    """A tiny target with confident predictions, 12 merged records and their store."""
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("sharp")
    target = xt.save_tiny_llama(root / "target")
    weights = load_file(target / "model.safetensors")
    weights["lm_head.weight"] = weights["lm_head.weight"] * SHARP
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    records = xt.make_records(12)
    data = xt.write_merged(root / "train.jsonl", records)
    stats = xt.write_stats(root / "train.stats.json", data, records)
    store = root / "store"
    proc = call_stage("extract", xt.extract_argv(target, data, store, "--stats", str(stats))[3:])
    assert proc.returncode == 0, proc.stderr
    return type("Sharp", (), {"target": target, "data": data, "store": store, "records": records})


def _run(sharp, out: Path, log: list | None = None, **opts):
    from pipeline.train.loop import Options, run

    torch.set_num_threads(1)
    base = {"store": sharp.store, "target": sharp.target, "out": out, "batch_size": 8, "max_len": 256, "lr": 1e-2,
            "log_every": 10, "save_every": 1000, "workers": 0, "ttt_length": 3, "warmup_ratio": 0.0}
    return run(Options(**{**base, **opts}), log=(log.append if log is not None else (lambda _s: None)))


def test_a_drafter_memorises_a_handful_of_samples_and_not_the_held_out_ones(sharp, tmp_path):
    """The overfit gate: a trainer that cannot memorise six samples is broken."""
    summary = _run(sharp, tmp_path / "run", steps=120, val_samples=6)
    assert summary.acc[0] >= 0.95, summary.history[-3:]
    assert min(summary.acc) >= 0.85, summary.acc
    val = summary.val
    assert val.samples == 6 and val.history[-1].step == 120
    assert val.acc[0] < 0.5 < summary.acc[0]  # random records: nothing learnt carries over, nothing leaked


def test_the_held_out_slice_is_fixed_by_the_seed_and_never_in_a_training_step(reference_store, tiny_target):
    from pipeline.train.data import open_store
    from pipeline.train.schedule import BatchPlan, build_schedule, split_validation

    store = open_store(reference_store, tiny_target)
    train, val = split_validation(store.samples, 7, seed=3)
    assert (train, val) == split_validation(store.samples, 7, seed=3)
    assert val != split_validation(store.samples, 7, seed=4)[1]
    assert sorted(train + val) == list(range(store.samples)) and len(val) == 7
    plan = BatchPlan(batch_tokens=None, batch_size=4, max_len=256, world_size=1, seed=3)
    plans, schedule = build_schedule(store.lengths, train, plan, epochs=3, steps=None)
    trained = {p for e, k in schedule for mb in plans[e][k] for p in mb}
    assert trained == set(train)


def test_validation_metrics_reach_events_log_and_summary(sharp, tmp_path, monkeypatch):
    ev = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(ev))
    log: list[str] = []
    summary = _run(sharp, tmp_path / "run", log=log, steps=20, val_samples=4, val_every=10)
    names = {(e.get("name"), e.get("step")) for e in iter_events(ev) if e.kind == "metric"}
    assert {("val_loss", 10), ("val_loss", 20), ("val_acc_0", 20), ("val_acc_2", 20)} <= names
    assert [h.step for h in summary.val.history] == [10, 20]
    on_disk = read_summary(tmp_path / "run" / "summary.json")
    assert on_disk.val.loss == summary.val.history[-1].loss
    assert any("validation (4 held-out samples)" in line for line in log)


def test_draft_vocabulary_comes_from_the_merged_dataset_without_held_out_records(sharp, tmp_path):
    from pipeline.train.data import open_store
    from pipeline.train.draft_vocab import count_dataset_tokens
    from pipeline.train.schedule import split_validation

    store = open_store(sharp.store, sharp.target)
    _train, val = split_validation(store.samples, 4, seed=0)
    held_ids = {store.ids[p] for p in val}
    assert None not in held_ids
    counts, skipped = count_dataset_tokens(sharp.data, 128, None, held_ids, set())
    want = torch.zeros(128, dtype=torch.int64)
    for r in sharp.records:
        if r["id"] not in held_ids:
            for t, m in zip(r["input_ids"], r["loss_mask"]):
                want[t] += m
    assert skipped == 4 and torch.equal(counts, want)

    log: list[str] = []
    summary = _run(sharp, tmp_path / "run", log=log, steps=2, val_samples=4, draft_vocab=40)
    note = summary.draft_vocab
    assert str(sharp.data) in note.source  # the store's meta names the dataset: chosen over it by default
    assert 0 < note.held_out_coverage < 1 and note.held_out_distinct_missing > 0
    assert summary.draft_vocab_coverage == note.held_out_coverage
    assert any("held-out samples'" in line and "distinct answer tokens are missing" in line for line in log)


def test_a_training_run_leaves_cudnns_attention_out_of_sdpas_choice(sharp, tmp_path, cudnn_sdp):
    # the drafter's first TTT step runs SDPA backward on a new batch length nearly every step
    _run(sharp, tmp_path / "run", steps=1, val_samples=0)
    assert not torch.backends.cuda.cudnn_sdp_enabled()


def test_a_vocabulary_file_other_than_the_stores_dataset_is_refused(sharp, tmp_path, capsys):
    from pipeline.train.__main__ import main

    other = tmp_path / "other.jsonl"
    other.write_text(sharp.data.read_text().replace('"tiny-0"', '"tiny-x"'))
    code = main(["--store", str(sharp.store), "--target", str(sharp.target), "--out", str(tmp_path / "run"),
                 "--steps", "1", "--batch-size", "4", "--max-len", "256", "--workers", "0", "--vocab-data", str(other)])
    err = capsys.readouterr().err
    assert code == 2 and str(other) in err and "dataset_sha256" in err and "--vocab-data store" in err


def test_a_finished_run_extends_with_a_larger_total_on_the_longer_schedule(sharp, tmp_path, monkeypatch):
    ref_ev, ev = tmp_path / "ref.jsonl", tmp_path / "run.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(ref_ev))
    ref = _run(sharp, tmp_path / "ref", steps=8, log_every=1, val_samples=2, warmup_ratio=0.25)
    monkeypatch.setenv("EAGLE3_EVENTS", str(ev))
    _run(sharp, tmp_path / "run", steps=4, log_every=1, val_samples=2, warmup_ratio=0.25)
    log: list[str] = []
    summary = _run(sharp, tmp_path / "run", log=log, steps=8, log_every=1, val_samples=2, warmup_ratio=0.25,
                   resume=True)
    assert summary.steps == 8 and summary.resumed_from == 4
    assert any("extending the run from 4 to 8 steps" in line for line in log)
    assert [h.step for h in summary.history] == list(range(1, 9))
    assert summary.tokens == ref.tokens  # the same samples as the 8-step run, counted once

    def lrs(path: Path) -> dict:
        return {e.get("step"): e.get("value") for e in iter_events(path) if e.kind == "metric" and e.get("name") == "lr"}

    got, want = lrs(ev), lrs(ref_ev)
    assert [got[s] for s in range(5, 9)] == pytest.approx([want[s] for s in range(5, 9)])


def test_a_stop_during_a_long_step_exits_within_the_grace_and_says_what_was_kept(sharp, tmp_path, xt):
    """A step of 3 TTT passes, each slowed to 4 s: a SIGTERM lands mid-step and does not wait for it."""
    ev, out = tmp_path / "events.jsonl", tmp_path / "run"
    argv = [sys.executable, "-m", "pipeline.train", "--store", str(sharp.store), "--target", str(sharp.target),
            "--out", str(out), "--steps", "5", "--batch-size", "8", "--max-len", "256", "--ttt-length", "3",
            "--log-every", "1", "--save-every", "1", "--workers", "1", "--val-share", "0", "--device", "cpu"]
    proc = subprocess.Popen(argv, env={**xt.cli_env(), "EAGLE3_EVENTS": str(ev), "EAGLE3_TRAIN_TTT_DELAY": "4"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=xt.REPO)
    deadline = time.monotonic() + 180
    while not any(e.kind == "artifact" for e in iter_events(ev)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint of step 1"
        time.sleep(0.05)  # wait-ok: polling the events file with a deadline
    os.killpg(proc.pid, signal.SIGTERM)
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 3, stderr
    assert "stopped during step 2/5: kept the checkpoint of step 1" in stdout, stdout
    assert "dropped the unfinished step 2" in stdout
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000001"  # step 2 was not finished
    print(f"exit {took:.1f}s after SIGTERM (a finished step 2 needs 12 s of TTT passes)")
    summary = read_summary(out / "summary.json")
    assert summary.stopped and summary.steps == 1


def test_two_trainings_of_one_store_agree_whatever_the_thread_count(sharp, tmp_path):
    """The demo's drafter is a function of its inputs: the same run on 1 and on 2 threads gives
    the same losses and weights to float rounding (reductions split differently)."""
    from safetensors.torch import load_file

    runs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        from pipeline.train.loop import Options, run

        s = run(Options(store=sharp.store, target=sharp.target, out=tmp_path / f"t{threads}", steps=12, batch_size=8,
                        max_len=256, lr=1e-2, log_every=1, save_every=1000, workers=1, ttt_length=3,
                        val_samples=2, warmup_ratio=0.0), log=lambda _s: None)
        runs.append((s, load_file(Path(s.checkpoint) / "model.safetensors")))
    torch.set_num_threads(1)
    (a, wa), (b, wb) = runs
    assert [h.loss for h in a.history] == pytest.approx([h.loss for h in b.history], rel=1e-4)
    assert a.val.acc == b.val.acc
    assert max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa) < 1e-4
