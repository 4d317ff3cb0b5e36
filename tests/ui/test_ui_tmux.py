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
        time.sleep(0.2)  # wait-ok: poll interval of a deadline loop
    raise AssertionError(f"timed out waiting for {what}; screen was:\n{text}")


def _quit(session: str) -> None:
    _tmux("send-keys", "-t", session, "q")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode != 0:
            return
        # The session may end between the two tmux calls: that is the quit we wait for.
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                text=True, timeout=10).stdout
        if "quit the console?" in screen:  # a phase still runs: the console asks first
            _tmux("send-keys", "-t", session, "y")
        time.sleep(0.2)  # wait-ok: poll interval of a deadline loop
    raise AssertionError("q did not quit the console")


def test_run_a_phase_with_keys_in_tmux(tmp_path: Path) -> None:
    """At 80x24, while a phase runs: its progress bar, rate, ETA and at least five of its log
    lines are on screen together (toasts never cover them), and then its done state."""
    cfg = write_config(tmp_path)
    session = f"eagle3-e2e-{uuid.uuid4().hex[:8]}"
    cmd = f"cd {REPO} && exec {sys.executable} -m console console {cfg} --no-mouse"
    _tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
    try:
        _wait_screen(session, lambda s: "Prepare inputs" in s and "GPU" in s, 60, "the console")
        _tmux("send-keys", "-t", session, "End")  # the last phase: stream
        _wait_screen(session, lambda s: "stream · Stream progress" in s, 30, "stream selected")
        _tmux("send-keys", "-t", session, "r")
        lines = [f"stream line {i:02d}" for i in range(26, 31)]

        def running_view(s: str) -> bool:
            return ("30.0% 3,000/10,000 samples" in s and "samples/s" in s and "ETA" in s
                    and all(ln in s for ln in lines) and "waiting for stream.stop" in s)

        text = _wait_screen(session, running_view, 60, "progress line and 5 log lines while it runs")
        assert "▶ stream · Stream progress and log lines · running" in text
        assert text.count("\n") <= 24
        (tmp_path / "stream.stop").touch()
        text = _wait_screen(session, lambda s: "✓ stream · Stream progress and log lines · done" in s, 60,
                            "done state")
        assert "stream: finished" in text  # the log's last line, tailed into the detail pane
        assert "✓ stream" in text  # and in the checklist, with its id
        _quit(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
