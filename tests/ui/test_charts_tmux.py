"""End to end: the charts as an operator sees them, in the real console in tmux at 80x24, on
a project whose train and evaluate runs finished (tests/ui/charts_project.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from charts_project import write_charts_project
from test_ui_tmux import REPO, _quit, _tmux, _wait_screen

from console.core.lifecycle.project import Project

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _run_to_end(project: Project, phase_id: str) -> None:
    project.start(phase_id)
    deadline = time.monotonic() + 60
    while next(s.state for s in project.statuses() if s.phase.id == phase_id) != "done":
        assert time.monotonic() < deadline, f"{phase_id} did not finish"
        time.sleep(0.1)  # wait-ok: poll interval of a deadline loop


def test_the_loss_curve_and_the_acceptance_bars_on_an_80x24_terminal(tmp_path: Path) -> None:
    cfg = write_charts_project(tmp_path)
    project = Project.load(cfg)
    for phase_id in ("train", "evaluate"):
        _run_to_end(project, phase_id)
    session = f"eagle3-charts-{uuid.uuid4().hex[:8]}"
    cmd = f"cd {REPO} && exec {sys.executable} -m console console {cfg} --no-mouse"
    _tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
    try:
        _wait_screen(session, lambda s: "Train the" in s, 60, "the console")
        _tmux("send-keys", "-t", session, "Home")
        # the log's lines come from a file tail in a worker, which a loaded machine may run after the charts draw
        text = _wait_screen(session, lambda s: "loss 1.208 " in s and "val acc_0 0.5877 " in s
                            and "train: finished 3000 steps" in s, 30, "the loss and val acc_0 charts, the log under them")
        row = next(ln for ln in text.splitlines() if "loss 1.208 " in ln and "val acc_0" in ln)
        curve = row.split("loss 1.208 ", 1)[1].split("  val acc_0", 1)[0].strip()
        assert len(curve) >= 20 and set(curve) <= set("▁▂▃▄▅▆▇█")
        assert curve[0] > curve[-1]  # the loss fell: the curve starts high and ends low
        _tmux("send-keys", "-t", session, "j")
        text = _wait_screen(session, lambda s: "acceptance 3.050 at 5,4,8" in s and "pos 1" in s, 30,
                            "the acceptance bars")
        assert "per position, 5,4,8" in text  # the best setting's rates, named
        assert any(ln.lstrip().startswith("pos 1-5  0.86 0.64") for ln in text.splitlines())
        assert any("5,4,8" in ln and "3.05" in ln and ln.rstrip().endswith("best") for ln in text.splitlines())
        assert text.count("\n") <= 24
        _quit(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
