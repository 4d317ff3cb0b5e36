"""Training never hangs on what a data-loader worker meets: a sample it cannot read ends the run
with exit 2 naming the file and the sample, a worker killed outright or one whose reader has a
bug ends it with exit 1, and whichever way the run ends (a worker stuck in a read included) every
worker is gone and the run folder's lock is free, within a bound. Before, the
three samples below made train print the worker's traceback and then hang until killed, holding
`.train.lock`, with and without --resume.

Of the samples a worker cannot read, one case runs as the program, whose process group is
watched to its end; the others call train's `main()` in this worker (stage_call.py), which
forks the same loader workers, and look for them among this process's children: a program
spends seconds of a core importing torch and transformers before its first sample."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import store_tamper
import torch
from stage_call import call_stage

from pipeline.events import iter_events
from pipeline.train import checkpoint

BOUND = 240  # seconds: a run that has not ended by then hangs (the runs here take about 20 s)
OPTS = ["--batch-tokens", "256", "--max-len", "256", "--workers", "2", "--ttt-length", "1", "--val-share", "0",
        "--log-every", "1", "--device", "cpu"]


def _metadata_int8(h, t):
    h["__metadata__"]["dtype"] = "int8"


def _scale_of_the_wrong_shape(h, t):
    h["hidden_state_scale"]["shape"] = [1, h["hidden_state_scale"]["shape"][0]]


def _rot(store: Path) -> list[Path]:
    return [store_tamper.rot_header_byte(store, i) for i in range(len(store_tamper.entries(store)))]


def _sealed(edit):
    def every_sample(store: Path) -> list[Path]:
        return [store_tamper.tamper(store, i, edit) for i in range(len(store_tamper.entries(store)))]

    return every_sample


CASES = {
    "one byte of a header rotted": _rot,
    "the dtype metadata set to int8": _sealed(_metadata_int8),
    "a per-token scale of the wrong shape": _sealed(_scale_of_the_wrong_shape),
}


@pytest.fixture(scope="module")
def checkpointed(fp8_store, tiny_target, tmp_path_factory, xt) -> Path:
    """A run folder whose latest checkpoint is step 2, trained on the intact store."""
    out = tmp_path_factory.mktemp("hangs") / "run"
    proc = call_stage("train", _argv(fp8_store, tiny_target, out, "--steps", "2", "--save-every", "1")[3:])
    assert proc.returncode == 0, proc.stderr
    return out


def _argv(store: Path, target: Path, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.train", "--store", str(store), "--target", str(target), "--out", str(out),
            *OPTS, *more]


def _ended_within_bound(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"train did not end within {BOUND} s: it hangs") from None


def _nothing_left(proc: subprocess.Popen, out: Path) -> None:
    """No process of the run's group is left, and the run folder's lock can be taken."""
    deadline = time.monotonic() + 30
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "a loader worker outlived the trainer"
        time.sleep(0.05)  # wait-ok: polling the process group with a deadline
    _lock_free(out)


def _lock_free(out: Path) -> None:
    with open(out / ".train.lock", "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if anything still holds it
        fcntl.flock(f, fcntl.LOCK_UN)


AS_PROGRAM = ("one byte of a header rotted", False)


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_sample_a_loader_worker_cannot_read_ends_the_run_naming_it(fp8_store, checkpointed, tiny_target, tmp_path,
                                                                    xt, case, resume):
    store = tmp_path / "store"
    shutil.copytree(fp8_store, store)
    paths = CASES[case](store)
    out = tmp_path / "run"
    if resume:
        shutil.copytree(checkpointed, out)
    more = ["--resume"] if resume else []
    # --checksums none: nothing is read before training, so the sample reaches a loader worker
    argv = _argv(store, tiny_target, out, "--steps", "6", "--checksums", "none", *more)
    if (case, resume) == AS_PROGRAM:
        proc = subprocess.Popen(argv, env=xt.cli_env(), cwd=xt.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        stdout, stderr = _ended_within_bound(proc)
        code = proc.returncode
    else:
        done = call_stage("train", argv[3:])
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error: "), stderr
    assert any(f"{p} (sample " in lines[0] for p in paths) and "key " in lines[0], lines[0]
    assert "Traceback" not in stderr
    if resume:
        assert "resuming" in stdout
    if (case, resume) == AS_PROGRAM:
        _nothing_left(proc, out)
    else:
        assert multiprocessing.active_children() == []  # the loader workers it forked are gone
        os.close(checkpoint._held.pop(os.path.realpath(out)))  # train holds it until its process exits
        _lock_free(out)


def test_a_loader_worker_killed_outright_ends_the_run(fp8_store, tiny_target, tmp_path, xt):
    out, events = tmp_path / "run", tmp_path / "events.jsonl"
    proc = subprocess.Popen(_argv(fp8_store, tiny_target, out, "--steps", "400", "--save-every", "2"),
                            env=xt.cli_env(EAGLE3_EVENTS=str(events), EAGLE3_TRAIN_STEP_DELAY="0.2"), cwd=xt.REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + BOUND
    while not any(e.kind == "metric" and e.get("step", 0) >= 3 for e in iter_events(events)):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no step within the bound"
        time.sleep(0.05)  # wait-ok: polling the events file with a deadline
    assert (out / "checkpoints" / "latest").is_file()  # step 2's, saved before step 3 began
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) >= 2, children  # the two loader workers
    os.kill(int(children[0]), signal.SIGKILL)
    _, stderr = _ended_within_bound(proc)
    assert proc.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "data-loader worker" in lines[0] and "--resume" in lines[0], stderr
    _nothing_left(proc, out)


class _Items(torch.utils.data.Dataset):
    """Item k is k, except `raises` (a bug: not bad input) and `stuck` (a read that never returns)."""

    def __init__(self, raises: int = -1, stuck: int = -1) -> None:
        self.raises, self.stuck = raises, stuck

    def __len__(self) -> int:
        return 8

    def __getitem__(self, k: int):
        if k == self.raises:
            raise KeyError("a bug in the reader")
        if k == self.stuck:
            time.sleep(BOUND)  # wait-ok: a worker stuck in a read (an NFS hang), never woken
        return torch.tensor([k])


def test_a_worker_that_raises_a_bug_is_exit_1_in_one_line_and_its_workers_are_gone():
    from pipeline.train.loader import LoaderError, batches

    seen, workers = [], []
    with pytest.raises(LoaderError) as raised, batches(_Items(raises=2), workers=2, prefetch=1, pin=False) as items:
        for item in items:
            workers = workers or multiprocessing.active_children()
            seen.append(int(item))
    assert seen == [0, 1]  # in order, up to the item that failed
    assert raised.value.exit_code == 1  # a bug, not the operator's input
    text = str(raised.value)
    assert "\n" not in text and "KeyError" in text and "reading item 2" in text, text
    assert workers and not any(w.is_alive() for w in workers)


def test_a_worker_stuck_in_a_read_is_killed_when_the_run_ends_though_it_ignores_stops():
    """The workers ignore SIGTERM (a stop is the trainer's, ended in its checkpoint), so torch's
    own shutdown cannot end one that never returns from a read; the run's end must."""
    from pipeline.train.loader import batches

    workers = []
    try:
        with pytest.raises(RuntimeError, match="the trainer ends"), \
                batches(_Items(stuck=1), workers=1, prefetch=1, pin=False) as items:
            assert int(next(items)) == 0
            workers = multiprocessing.active_children()
            raise RuntimeError("the trainer ends (a stop, an error) while item 1 is being read")
        assert workers and not any(w.is_alive() for w in workers)
    finally:
        for w in workers:
            w.kill()
