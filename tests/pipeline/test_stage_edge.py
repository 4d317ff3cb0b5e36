"""Ctrl-C on every stage program (extract's test lives with extract): once the stage is at
work, SIGINT to its process group, as a terminal sends it, ends it with exit 130 and one
`<stage>: interrupted` line on stderr, never a traceback, and leaves no temporary behind.

A stage too quick to catch on a tiny input is caught waiting on a slow peer instead: an events
file nobody reads yet (export), a log reader that stopped reading (serve), another patcher
holding the lock (patch), a slow server (regenerate)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from standin_sglang import StandIn
from test_evaluate import VOCAB
from test_export import make_checkpoint, make_drafter, make_target
from test_merge_kill import _leftovers, _wait_for_parts, workload  # noqa: F401  (workload: the fixture)
from test_regenerate import MODEL, write_source
from test_regenerate import argv as regenerate_argv

from pipeline.events import iter_events
from pipeline.records import regenerate_stats

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 240.0


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **extra)
    return env


class Stage:
    """A stage program in its own process group, its stderr (and, unless given, stdout) in files."""

    def __init__(self, tmp: Path, argv: list[str], env: dict | None = None, stdout: int | None = None) -> None:
        self.err_path, self.out_path = tmp / "stage.err", tmp / "stage.out"
        with open(self.err_path, "w") as err, open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=env or _env(), stdout=out if stdout is None else stdout,
                                         stderr=err, start_new_session=True)

    def wait_until(self, cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not cond():
            assert self.proc.poll() is None, f"it ended (exit {self.proc.returncode}) before {what}: {self.err()}"
            assert time.monotonic() < deadline, f"no {what} within {DEADLINE:.0f} s"
            time.sleep(0.02)  # wait-ok: polling a condition under a deadline

    def blocked_in(self, *wchans: str) -> bool:
        """The main thread sleeps in a kernel function named so (a pipe or FIFO with no peer;
        the names vary a little between kernels: anon_pipe_write, pipe_write)."""
        try:
            wchan = Path(f"/proc/{self.proc.pid}/wchan").read_text()
        except OSError:
            return False
        return any(w in wchan for w in wchans)

    def ctrl_c(self, then: Callable[[], None] = lambda: None) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)
        then()
        try:
            return self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def err(self) -> str:
        return self.err_path.read_text()

    def out(self) -> str:
        return self.out_path.read_text()


def assert_interrupted(stage: Stage, name: str) -> str:
    """Exit 130, the interrupt said once as stderr's last line, no traceback; that line."""
    err = stage.err()
    assert stage.proc.returncode == 130, f"exit {stage.proc.returncode}, stderr {err!r}"
    said = [line for line in err.splitlines() if line.startswith(f"{name}: interrupted")]
    assert len(said) == 1, err
    assert err.strip().splitlines()[-1] == said[0], err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    return said[0]


def _progress(events: Path, unit: str, done: int) -> Callable[[], bool]:
    def reached() -> bool:
        return events.exists() and any(e.kind == "progress" and e.get("unit") == unit and e.get("done", 0) >= done
                                       for e in iter_events(events))

    return reached


def test_merge(workload, tmp_path):  # noqa: F811
    out = tmp_path / "merged" / "train.jsonl"
    argv = [sys.executable, "-m", "pipeline.merge", "--tokenizer", str(workload / "tok"), "--out", str(out),
            "--workers", "2", "--max-len", "512", str(workload / "raw")]
    stage = Stage(tmp_path, argv)
    _wait_for_parts(stage.proc, out)
    stage.ctrl_c()
    assert assert_interrupted(stage, "merge") == "merge: interrupted; temporary files removed"
    assert _leftovers(out) == [] and not out.exists()


def test_train(reference_store, tiny_target, tmp_path, xt):
    events, run = tmp_path / "events.jsonl", tmp_path / "run"
    argv = [sys.executable, "-m", "pipeline.train", "--store", str(reference_store), "--target", str(tiny_target),
            "--out", str(run), "--steps", "200", "--save-every", "2", "--batch-tokens", "256", "--max-len", "256",
            "--log-every", "1", "--workers", "1", "--device", "cpu"]
    env = {**xt.cli_env(), "EAGLE3_EVENTS": str(events), "EAGLE3_TRAIN_STEP_DELAY": "0.2"}
    stage = Stage(tmp_path, argv, env)
    stage.wait_until(_progress(events, "steps", 3), "third step")
    stage.ctrl_c()
    line = assert_interrupted(stage, "train")
    assert "checkpoint" in line, line  # Ctrl-C checkpoints as a stop does: a rerun with --resume goes on
    assert (run / "checkpoints" / "latest").is_file()


def test_export(tmp_path):
    target = make_target(tmp_path / "target")
    run = make_checkpoint(tmp_path / "train", make_drafter(target))
    # an events file nobody reads yet: export waits in open() (its inputs are read bounded, and a
    # FIFO among them is refused at once)
    events = tmp_path / "events.fifo"
    os.mkfifo(events)
    out = tmp_path / "drafter"
    stage = Stage(tmp_path, [sys.executable, "-m", "pipeline.export", "--checkpoint", str(run), "--target",
                             str(target), "--out", str(out)], _env(EAGLE3_EVENTS=str(events)))
    stage.wait_until(lambda: stage.blocked_in("wait_for_partner", "fifo_open"), "wait on the events file")
    stage.ctrl_c()
    assert_interrupted(stage, "export")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_evaluate(evaluation_tiny, tmp_path):
    tiny = evaluation_tiny
    prompts, events = tmp_path / "prompts.jsonl", tmp_path / "events.jsonl"
    gen = torch.Generator().manual_seed(7)
    with open(prompts, "w") as f:
        for i in range(40):
            ids = torch.randint(3, VOCAB, (12,), generator=gen).tolist()
            f.write(json.dumps({"id": f"q{i}", "input_ids": ids + [7], "loss_mask": [0] * 12 + [1]}) + "\n")
    report = tmp_path / "r.json"
    argv = [sys.executable, "-m", "pipeline.evaluate", "--drafter", str(tiny["drafter"]), "--target",
            str(tiny["target"]), "--prompts", str(prompts), "--limit", "40", "--max-new-tokens", "40",
            "--device", "cpu", "--report", str(report)]
    stage = Stage(tmp_path, argv, _env(EAGLE3_EVENTS=str(events)))
    stage.wait_until(_progress(events, "prompts", 1), "first scored prompt")
    stage.ctrl_c()
    assert_interrupted(stage, "evaluate")
    assert not report.exists()


def test_demo(tmp_path):
    events, out = tmp_path / "events.jsonl", tmp_path / "assets"
    argv = [sys.executable, "-m", "pipeline.demo", "--out", str(out), "--quick", "--train-steps", "100000"]
    stage = Stage(tmp_path, argv, _env(EAGLE3_EVENTS=str(events)))
    stage.wait_until(_progress(events, "steps", 1), "first training step of the demo's target")
    stage.ctrl_c()
    assert_interrupted(stage, "demo")
    assert not (out / "target").exists() and not (out / "assets.json").exists()
    assert [p.name for p in out.iterdir() if ".tmp-" in p.name] == []  # the staged target went with the stop


def test_serve(tiny_target, tmp_path):
    read, write = os.pipe()  # its log reader stopped reading (a paused terminal): the pipe is full
    os.set_blocking(write, False)
    try:
        while True:
            os.write(write, b"x" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(write, True)
    argv = [sys.executable, "-m", "pipeline.serve", "--mode", "normal", "--model", str(tiny_target)]
    drains: list[threading.Thread] = []
    try:
        stage = Stage(tmp_path, argv, stdout=write)
        os.close(write)
        stage.wait_until(lambda: stage.blocked_in("pipe_write", "pipe_wait"), "write to the full log pipe")

        def reader_comes_back() -> None:
            """Once the interrupt is said (the pipe still full: serve cannot have reached its exec), the
            reader drains the pipe, so what is left of the log can go out as serve exits."""
            deadline = time.monotonic() + DEADLINE
            while "serve: interrupted" not in stage.err() and stage.proc.poll() is None:
                assert time.monotonic() < deadline, "serve never said it was interrupted"
                time.sleep(0.02)  # wait-ok: polling its stderr under a deadline
            drain = threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(read, 65536), b"")],
                                     daemon=True)
            drain.start()
            drains.append(drain)

        stage.ctrl_c(then=reader_comes_back)
    finally:
        for drain in drains:  # at EOF once serve is gone; closing `read` under it would free an fd it still reads
            drain.join(DEADLINE)
        os.close(read)
    assert_interrupted(stage, "serve")


def test_patch(tmp_path):
    model = tmp_path / "llama.py"
    model.write_text("# a model file\n")
    with open(tmp_path / ".llama.py.eagle3-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another patcher is at work on this file
        stage = Stage(tmp_path, [sys.executable, "-m", "pipeline.patch", "apply", "--file", str(model)])
        stage.wait_until(lambda: "waiting up to" in stage.err(), "wait for the lock")
        stage.ctrl_c()
    assert_interrupted(stage, "patch")
    assert model.read_text() == "# a model file\n" and not (tmp_path / "llama.py.eagle3-orig").exists()


def test_regenerate(tmp_path):
    src = write_source(tmp_path / "chats.jsonl", 400)
    out = tmp_path / "out.jsonl"
    with StandIn(MODEL, None, hidden=8, chat_latency=0.05) as server:
        stage = Stage(tmp_path, regenerate_argv(src, out, server.url, more=("--concurrency", "2")))
        stage.wait_until(lambda: out.exists() and out.read_bytes().count(b"\n") >= 2, "two records written")
        stage.ctrl_c()
    line = assert_interrupted(stage, "regenerate")
    assert "rerun the same command to resume" in line
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.status == "stopped" and stats.records_out == out.read_bytes().count(b"\n")


def test_prepare(tmp_path):
    from recipe_inputs import sharegpt_text

    source, events, out = tmp_path / "sharegpt.json", tmp_path / "events.jsonl", tmp_path / "split"
    source.write_text(sharegpt_text(50_000))  # some 15 MB: seconds of reading after the first 2,000 records
    argv = [sys.executable, "-m", "pipeline.prepare", "split", "--sharegpt", str(source), "--out", str(out)]
    stage = Stage(tmp_path, argv, _env(EAGLE3_EVENTS=str(events)))
    stage.wait_until(_progress(events, "bytes", 1), "the split's first progress")
    stage.ctrl_c()
    assert_interrupted(stage, "prepare")
    assert not out.exists() and list(tmp_path.glob(".split.*")) == []  # the staged folder went with the stop
