"""Detached phase runs: run directories, locks, and the manager that starts (through the
launcher program, `python -m console.launcher`), stops and describes runs from their files alone."""

from __future__ import annotations

from console.core.runs.manager import (
    RunState,
    RunStatus,
    latest_run,
    list_runs,
    readiness,
    run_status,
    start_run,
    stop_run,
)
from console.core.runs.rundir import ExitInfo, PidInfo, RunDir, atomic_write_json

__all__ = ["ExitInfo", "PidInfo", "RunDir", "RunState", "RunStatus", "atomic_write_json",
           "latest_run", "list_runs", "readiness", "run_status", "start_run", "stop_run"]
