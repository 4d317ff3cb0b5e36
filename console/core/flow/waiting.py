"""Waiting on a run from a command line: its log copied out as it grows until the run ends
(verification included), or, for a service, until it is ready. What the wait came to is
data; the caller words it. Ctrl-C (KeyboardInterrupt) reaches the caller, and the run goes
on without it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from console.core.lifecycle.project import Project
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.model.config import Phase
from console.core.runs import manager
from console.core.runs.rundir import RunDir
from console.core.text.terminal_text import strip_controls

LOG_POLL_S = 0.2
SERVICE_POLL_S = 1.0


@dataclass(frozen=True)
class Waited:
    """`done`: a batch phase ended done; `ready`: a service answers; `ended`: the run ended
    otherwise (failed, stopped, lost; a service before it was ready); `not_ready`: a service
    still not ready at the deadline (it keeps running)."""

    phase: Phase
    outcome: Literal["done", "ready", "ended", "not_ready"]
    status: PhaseStatus

    @property
    def ok(self) -> bool:
        return self.outcome in ("done", "ready")


def copy_log(path: Path, out: TextIO, follow_until: Callable[[], bool] | None = None, offset: int = 0) -> int:
    """Copy the log from `offset`, terminal controls removed; with `follow_until`, keep going
    until it says stop. The offset reached."""
    while True:
        offset = _copy_from(path, out, offset)
        if follow_until is None:
            return offset
        if follow_until():
            return _copy_from(path, out, offset)  # what was written as the phase ended
        time.sleep(LOG_POLL_S)  # wait-ok: the log grows at the run's pace; a stat per look


def _copy_from(path: Path, out: TextIO, offset: int) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            while chunk := f.read(1 << 16):
                offset += len(chunk)
                out.write(strip_controls(chunk.decode("utf-8", errors="replace")))
    except FileNotFoundError:
        pass
    out.flush()
    return offset


def follow(run: RunDir, out: TextIO) -> None:
    """Copy a run's log until it ends, verification included."""
    copy_log(run.output_log, out, follow_until=lambda: manager.run_status(run).state not in LIVE)


def wait(project: Project, phase: Phase, run: RunDir, out: TextIO, timeout: float) -> Waited:
    """A batch phase: its log until it ends. A service: until it is ready, it ends (then its
    log), or `timeout` seconds pass."""
    if phase.kind != "service":
        follow(run, out)
        st = project.status(phase.id)
        return Waited(phase, "done" if st.state == State.DONE else "ended", st)
    deadline = time.monotonic() + timeout
    while True:
        st = project.status(phase.id)
        if st.state != State.RUNNING:
            copy_log(run.output_log, out)
            return Waited(phase, "ended", st)
        if st.service_ready:
            return Waited(phase, "ready", st)
        if time.monotonic() >= deadline:
            return Waited(phase, "not_ready", st)
        time.sleep(SERVICE_POLL_S)  # wait-ok: a readiness probe per second, under the deadline
