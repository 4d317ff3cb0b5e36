"""The suite's in-process stage runner (stage_call.py) stands in for the program: the same exit
code and output as `python -m pipeline.<stage>`, and the test process as it was afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import torch
from stage_call import call_stage


def test_a_stage_run_in_process_exits_and_says_what_its_program_does(tmp_path, xt):
    for argv in (["--verify", "--out", str(tmp_path / "missing")], ["--threads", "0"], ["--verify"]):
        real = subprocess.run([sys.executable, "-m", "pipeline.extract", *argv], cwd=xt.REPO, env=xt.cli_env(),
                              capture_output=True, text=True, timeout=120)
        got = call_stage("extract", argv)
        assert real.returncode != 0, real.stderr
        assert (got.returncode, got.stdout, got.stderr) == (real.returncode, real.stdout, real.stderr), argv


def test_what_a_stage_changes_in_its_process_is_put_back(tmp_path, tiny_target, tiny_data, monkeypatch, xt):
    monkeypatch.setenv("EAGLE3_EVENTS", str(tmp_path / "not-this-one.jsonl"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(1)
    before = (dict(os.environ), os.getcwd(), list(sys.argv), signal.getsignal(signal.SIGTERM),
              signal.getsignal(signal.SIGINT))
    events = tmp_path / "events.jsonl"
    argv = xt.extract_argv(tiny_target, tiny_data.path, tmp_path / "store", "--threads", "2", "--limit", "2")[3:]
    got = call_stage("extract", argv, env={"EAGLE3_EVENTS": str(events)})
    assert got.returncode == 0, got.stderr
    assert events.stat().st_size > 0 and not (tmp_path / "not-this-one.jsonl").exists()
    assert (dict(os.environ), os.getcwd(), list(sys.argv), signal.getsignal(signal.SIGTERM),
            signal.getsignal(signal.SIGINT)) == before
    assert torch.get_num_threads() == 1

