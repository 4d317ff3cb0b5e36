"""Drafter training on a tiny store: it learns, refuses bad inputs, resumes exactly, runs as DDP."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from forked_signal import exit_code_of_forked_child_signalled_under
from stage_call import call_stage, group_gone

from pipeline.events import iter_events
from pipeline.records.train_summary import read_summary

TRAIN_OPTS = ["--batch-tokens", "256", "--max-len", "256", "--lr", "3e-3", "--log-every", "1", "--workers", "1"]


def train_argv(store: Path, target: Path, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.train", "--store", str(store), "--target", str(target), "--out", str(out),
            *TRAIN_OPTS, *more]


def losses(events: Path) -> dict[int, float]:
    return {e.get("step"): e.get("value") for e in iter_events(events) if e.kind == "metric" and e.get("name") == "loss"}


def wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # wait-ok: polling an events file with a deadline


def start(argv: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=str(Path(__file__).resolve().parents[2]))


def test_loss_falls_when_the_drafter_fits_a_tiny_store(reference_store, tiny_target, tmp_path):
    from pipeline.train.loop import Options, run

    torch.set_num_threads(1)
    summary = run(Options(store=reference_store, target=tiny_target, out=tmp_path / "run", steps=15, batch_size=36,
                          max_len=256, lr=1e-2, log_every=1, save_every=15, workers=0, ttt_length=3),
                  log=lambda _s: None)
    hist = summary.history
    assert len(hist) == 15
    first, last = hist[0], hist[-1]
    assert last.loss < 0.5 * first.loss, (first, last)
    assert last.acc[0] > first.acc[0] + 0.05, (first, last)
    ckpt = Path(summary.checkpoint)
    assert ckpt.name == "step_00000015"
    from pipeline.drafter import EXPORT_KEYS, load_drafter

    drafter = load_drafter(ckpt)
    assert sorted(drafter.state_dict()) == sorted(EXPORT_KEYS)
    assert read_summary(tmp_path / "run" / "summary.json").steps == 15


def test_kill_and_resume_gives_the_loss_curve_of_an_uninterrupted_run(reference_store, tiny_target, tmp_path, xt):
    env = xt.cli_env()
    steps = ["--steps", "16", "--save-every", "4"]
    ref_events = tmp_path / "ref.jsonl"
    ref = call_stage("train", train_argv(reference_store, tiny_target, tmp_path / "ref", *steps)[3:],
                     env={"EAGLE3_EVENTS": str(ref_events)})
    assert ref.returncode == 0, ref.stderr
    reference = losses(ref_events)
    assert sorted(reference) == list(range(1, 17))

    out, ev = tmp_path / "run", tmp_path / "run.jsonl"
    slow = {**env, "EAGLE3_EVENTS": str(ev), "EAGLE3_TRAIN_STEP_DELAY": "0.2"}
    # 1: SIGKILL (process group, loader workers included) after the step-4 checkpoint, mid-run
    proc = start(train_argv(reference_store, tiny_target, out, *steps), slow)
    wait_for(lambda: max(losses(ev), default=0) >= 6, proc, "step 6")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    killed_at = max(losses(ev))
    assert killed_at < 16
    resumed_from = int((out / "checkpoints" / "latest").read_text().strip().split("_")[1])
    assert 4 <= resumed_from <= killed_at
    # 2: resume, then SIGTERM the group as the console's stop does: a checkpoint and exit 3
    first_pass = [e for e in iter_events(ev) if e.kind == "metric" and e.get("name") == "loss"]
    proc = start(train_argv(reference_store, tiny_target, out, *steps, "--resume"), slow)
    wait_for(lambda: len(iter_events_after(ev, first_pass)) >= 2, proc, "two resumed steps")
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    group_gone(proc.pid)
    assert proc.returncode == 3, err
    assert "--resume" in err
    stopped_at = int((out / "checkpoints" / "latest").read_text().strip().split("_")[1])
    assert resumed_from < stopped_at < 16
    # 3: resume to the end
    done = call_stage("train", train_argv(reference_store, tiny_target, out, *steps, "--resume")[3:],
                      env={"EAGLE3_EVENTS": str(ev)})
    assert done.returncode == 0, done.stderr
    # every loss any of the three runs logged equals the uninterrupted run's loss at that step
    seen = 0
    for e in iter_events(ev):
        if e.kind == "metric" and e.get("name") == "loss":
            assert e.get("value") == pytest.approx(reference[e.get("step")], abs=1e-6), e.get("step")
            seen += 1
    assert seen >= 16 + (killed_at - resumed_from)
    assert max(losses(ev)) == 16
    # summary.json after the resumes holds the whole run: every step's metrics, every token once
    summary = read_summary(out / "summary.json")
    reference_summary = read_summary(tmp_path / "ref" / "summary.json")
    assert [h.step for h in summary.history] == list(range(1, 17))
    assert summary.tokens == reference_summary.tokens
    assert [h.loss for h in summary.history] == pytest.approx([h.loss for h in reference_summary.history],
                                                                   abs=1e-5)
    kept = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert kept[-1] == "step_00000016" and len(kept) <= 3


def iter_events_after(path: Path, before: list) -> list:
    """Loss events logged after the events already in `before` (a resumed run's)."""
    all_losses = [e for e in iter_events(path) if e.kind == "metric" and e.get("name") == "loss"]
    return all_losses[len(before):]


@pytest.mark.parametrize("online", [False, True], ids=["store", "online"])
def test_two_cpu_ranks_train_with_gloo_and_write_one_checkpoint(reference_store, tiny_data, tiny_target, tmp_path, xt,
                                                                online):
    """Online, each rank loads its own target and computes its own micro-batch's states."""
    ev = tmp_path / "events.jsonl"
    source = ["--data", str(tiny_data.path)] if online else ["--store", str(reference_store)]
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
            "pipeline.train", *source, "--target", str(tiny_target), "--out",
            str(tmp_path / "run"), *TRAIN_OPTS, "--steps", "6", "--save-every", "3", "--device", "cpu"]
    proc = subprocess.run(argv, check=False, env={**xt.cli_env(), "EAGLE3_EVENTS": str(ev)}, capture_output=True, text=True,
                          timeout=300, cwd=xt.REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / "run" / "summary.json")
    assert summary.world_size == 2 and summary.steps == 6
    assert summary.source == ("online" if online else "store")
    # rank 0 alone writes events: one loss per step, not two
    assert sorted(losses(ev)) == [1, 2, 3, 4, 5, 6]
    from pipeline.drafter import load_drafter

    ckpt = tmp_path / "run" / "checkpoints" / "step_00000006"
    state = torch.load(ckpt / "train_state.pt", weights_only=False)
    assert state["world_size"] == 2 and state["step"] == 6
    load_drafter(ckpt)
    assert "ranks agree on the weights" in proc.stdout


def _main(*argv: str) -> int:
    from pipeline.train.__main__ import main

    return main(list(argv))


def test_refuses_a_store_with_a_missing_sample(reference_store, tiny_target, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(reference_store, store)
    lines = (store / "manifest.jsonl").read_text().splitlines(keepends=True)
    (store / "manifest.jsonl").write_text("".join(lines[:-1]))
    rc = _main("--store", str(store), "--target", str(tiny_target), "--out", str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert rc == 2
    assert "not intact" in err and "missing" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_refuses_a_target_the_store_was_not_built_from(reference_store, tiny_target, tmp_path, capsys, xt):
    other = xt.save_tiny_llama(tmp_path / "other", seed=1)  # same shape, other weights
    rc = _main("--store", str(reference_store), "--target", str(other), "--out", str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert rc == 2 and "target_fingerprint" in err, err

    from transformers import LlamaConfig, LlamaForCausalLM

    wider = tmp_path / "wider"  # a real target of another width (a config that only claims one: test_online_inputs)
    LlamaForCausalLM(LlamaConfig(vocab_size=xt.VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=8,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(wider)
    rc = _main("--store", str(reference_store), "--target", str(wider), "--out", str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert rc == 2 and "hidden_size" in err and "another target" in err, err

    rc = _main("--store", str(reference_store), "--target", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run"))
    assert rc == 2 and "config.json" in capsys.readouterr().err


def test_refuses_to_mix_a_new_run_into_old_checkpoints(reference_store, tiny_target, tmp_path, capsys):
    where = ("--store", str(reference_store), "--target", str(tiny_target), "--out", str(tmp_path / "run"),
             "--steps", "2", "--max-len", "64", "--workers", "0")
    assert _main(*where, "--batch-size", "8") == 0
    capsys.readouterr()
    assert _main(*where, "--batch-size", "8") == 2
    assert "--resume" in capsys.readouterr().err
    assert _main(*where, "--batch-size", "4", "--resume") == 2
    assert "batch_size" in capsys.readouterr().err
    assert _main(*where, "--batch-size", "8", "--overwrite") == 0


def test_a_loader_worker_signalled_before_its_init_stays_silent(capfd):
    """A DataLoader worker forked before its worker_init_fn inherits the trainer's handler:
    a stop in that window must not print a second "checkpointing and stopping" line."""
    import threading

    from pipeline.train.__main__ import stop_signals

    stop = threading.Event()
    with stop_signals(stop) as guard:  # what train's main installs
        assert exit_code_of_forked_child_signalled_under(guard.handle) == 0
    assert "checkpointing and stopping" not in capfd.readouterr().out
    assert not stop.is_set()


def test_overwrite_never_deletes_a_folder_train_did_not_write(reference_store, tiny_target, tmp_path, capsys):
    mine = tmp_path / "experiments"
    (mine / "checkpoints").mkdir(parents=True)
    (mine / "checkpoints" / "precious.pt").write_bytes(b"weeks of work")
    (mine / "notes.md").write_text("do not lose")
    where = ("--store", str(reference_store), "--target", str(tiny_target), "--out", str(mine),
             "--steps", "2", "--max-len", "64", "--workers", "0", "--batch-size", "8")
    for more in ((), ("--overwrite",), ("--resume",)):
        assert _main(*where, *more) == 2
        assert "train replaces only folders it wrote itself" in capsys.readouterr().err
    assert (mine / "checkpoints" / "precious.pt").read_bytes() == b"weeks of work"
    assert sorted(p.name for p in mine.iterdir()) == ["checkpoints", "notes.md"]
    run = tmp_path / "run"
    assert _main(*where[:5], str(run), *where[6:]) == 0
    assert _main(*where[:5], str(run), *where[6:], "--overwrite") == 0  # its own folder: replaced


def test_a_run_from_the_command_line_and_one_from_options_train_with_the_same_settings():
    """bench and the tests build Options in Python; operators pass flags. A default that drifts
    between the two (--max-len was written in both) trains another run than the one described."""
    from pipeline.train.options import Options, parse

    assert parse(["--store", "s", "--target", "t", "--out", "o"]).resolved() == Options(target=Path("t"), out=Path("o"), store=Path("s")).resolved()
    resolved = Options(target=Path("t"), out=Path("o"), store=Path("s")).resolved()
    assert (resolved.epochs, resolved.batch_tokens) == (1, 16384)
    assert Options(target=Path("t"), out=Path("o"), store=Path("s"), steps=5, batch_size=8).resolved().epochs is None
