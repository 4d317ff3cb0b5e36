"""A GPU process is attributed to the phase whose session it runs in."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.core.telemetry.ownership import owner_map, phase_of_pid

# A stand-in launcher: starts a child in its session and a grandchild that leaves it with
# setsid (as some multi-process launchers do), writes both pids, then waits.
LAUNCHER = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # wait-ok: the phase program's own work, not a test pause
escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)  # wait-ok: the phase program's own work, not a test pause
open(sys.argv[1] + ".tmp", "w").write(f"{child.pid} {escaped.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)  # wait-ok: the phase program's own work, not a test pause
"""


@pytest.fixture
def phase_processes(tmp_path: Path):
    out = tmp_path / "pids"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(out)], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not out.exists():
            assert time.monotonic() < deadline, "stand-in launcher did not start"
            time.sleep(0.02)  # wait-ok: poll interval
        child, escaped = map(int, out.read_text().split())
        yield launcher.pid, child, escaped
    finally:
        for pid in (locals().get("child"), locals().get("escaped")):
            if pid:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        launcher.kill()
        launcher.wait()


def test_child_of_a_setsid_launcher_maps_to_its_phase(phase_processes):
    launcher, child, escaped = phase_processes
    sessions = {launcher: "extract", 1: "not-a-phase-really"}
    assert os.getsid(child) == launcher
    assert phase_of_pid(child, sessions) == "extract"
    assert phase_of_pid(launcher, sessions) == "extract"


def test_a_process_that_left_the_session_is_found_through_its_parents(phase_processes):
    launcher, _, escaped = phase_processes
    assert os.getsid(escaped) != launcher
    assert phase_of_pid(escaped, {launcher: "train"}) == "train"


def test_unrelated_gone_and_odd_pids_have_no_phase(phase_processes):
    launcher, child, _ = phase_processes
    assert phase_of_pid(os.getpid(), {launcher: "extract"}) is None
    assert phase_of_pid(2**22 + 12345, {launcher: "extract"}) is None  # beyond pid_max: gone
    assert phase_of_pid(-5, {launcher: "extract"}) is None
    assert phase_of_pid(child, {}) is None


def test_owner_map_answers_like_phase_of_pid(phase_processes):
    launcher, child, escaped = phase_processes
    owner = owner_map({launcher: "serve"})
    assert [owner(child), owner(escaped), owner(os.getpid())] == ["serve", "serve", None]
