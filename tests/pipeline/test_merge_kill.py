"""A killed merge leaves nothing behind that the next run trips over or keeps forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forked_signal import exit_code_of_forked_child_signalled_under

from pipeline.chat.synthetic import generate, write_jsonl
from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.merge.__main__ import main as merge_main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """Enough records that tokenizing outlasts the poll that waits for it to start."""
    root = tmp_path_factory.mktemp("kill")
    sources = generate(0)
    raw = root / "raw"
    raw.mkdir()
    for name, records in sources.items():
        write_jsonl(raw / f"{name}.jsonl", records[:150])
    texts = [m["content"] for recs in sources.values() for r in recs[:50] for m in r["conversations"]]
    build_tokenizer(texts, vocab_size=512, chat_template=CHAT_TEMPLATE).save_pretrained(root / "tok")
    return root


def _argv(root: Path, out: Path) -> list[str]:
    return ["--tokenizer", str(root / "tok"), "--out", str(out), "--workers", "2", "--max-len", "512", str(root / "raw")]


def _start(root: Path, out: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pipeline.merge", *_argv(root, out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for_parts(proc: subprocess.Popen, out: Path, timeout: float = 120) -> Path:
    parts = out.with_name(f".{out.name}.parts-{proc.pid}")
    deadline = time.monotonic() + timeout
    while not any(parts.glob("*.jsonl")):
        assert proc.poll() is None, f"merge ended before its parts folder filled: {proc.communicate()}"
        assert time.monotonic() < deadline, "the merge never started tokenizing"
        time.sleep(0.01)  # wait-ok: polling a condition with a deadline
    return parts


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith("."))


def test_a_rerun_removes_the_parts_folder_of_a_merge_killed_with_sigkill(workload, tmp_path, capsys):
    out = tmp_path / "merged" / "train.jsonl"
    proc = _start(workload, out)
    parts = _wait_for_parts(proc, out)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert parts.exists(), "SIGKILL cannot clean up: the folder must still be there for the rerun to find"

    assert merge_main(_argv(workload, out)) == 0
    assert "removed 1 leftovers of killed merges" in capsys.readouterr().out
    assert _leftovers(out) == []
    assert out.exists() and out.with_name("train.stats.json").exists()


def test_sigterm_stops_a_merge_and_it_removes_its_own_temporary_files(workload, tmp_path):
    out = tmp_path / "merged" / "train.jsonl"
    proc = _start(workload, out)
    _wait_for_parts(proc, out)
    os.killpg(proc.pid, signal.SIGTERM)  # as the console stops a phase: the whole group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert stderr.strip() == "merge: stopped by SIGTERM; temporary files removed"
    assert _leftovers(out) == []
    assert not out.exists()


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork")
def test_a_worker_terminated_before_its_initializer_ends_quietly(capfd):
    """A forked worker still carries the parent's SIGTERM handler until init_worker runs:
    a stop in that window must not print a multiprocessing traceback to the operator."""
    from pipeline.program_edge import on_sigterm

    with on_sigterm() as term:  # what merge's main installs
        assert exit_code_of_forked_child_signalled_under(term.handle) == 143
    assert capfd.readouterr().err == ""
