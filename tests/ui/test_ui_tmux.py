"""End to end: the real console in a real terminal (tmux, 80x24). Run a phase with keys and
read its log lines and its done state off the screen."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from ui_harness import write_config

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True, timeout=10).stdout


def _screen(session: str) -> str:
    return _tmux("capture-pane", "-p", "-t", session)


def _wait_screen(session: str, predicate, timeout: float, what: str) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = _screen(session)
        if predicate(text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; screen was:\n{text}")


def test_run_a_phase_with_keys_in_tmux(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    session = f"eagle3-e2e-{uuid.uuid4().hex[:8]}"
    cmd = f"cd {REPO} && exec {sys.executable} -m console console {cfg} --no-mouse"
    _tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
    try:
        _wait_screen(session, lambda s: "Prepare inputs" in s and "GPU" in s, 30, "the console")
        _tmux("send-keys", "-t", session, "r")
        text = _wait_screen(session, lambda s: "progress 100%" in s, 30, "the phase's last log line")
        assert "prep line 3" in text  # log lines, tailed into the detail pane
        text = _wait_screen(session, lambda s: "✓ prep · Prepare inputs · done" in s, 30, "done state")
        assert "✓ Prepare inputs" in text  # and in the checklist
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode != 0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("q did not quit the console")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
