"""Which phase owns a process seen on a GPU.

Every phase runs in its own session whose id is its launcher's pid (the launcher is started
with setsid), so a GPU process belongs to the phase whose session it is in. A program that
calls setsid again (some multi-process launchers do) leaves that session; for those the
parent chain still leads back to the launcher.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import psutil


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (OSError, ValueError, OverflowError):
        return None


def phase_of_pid(pid: int, sessions: Mapping[int, str]) -> str | None:
    """The phase id owning `pid`, given {launcher pid (= session id): phase id}; None for a
    process of no running phase, one that is gone, or one this user may not inspect.
    Never raises."""
    try:
        if not sessions:
            return None
        if pid in sessions:
            return sessions[pid]
        sid = _sid(pid)
        if sid is not None and sid in sessions:
            return sessions[sid]
        try:
            parents = psutil.Process(pid).parents()
        except (psutil.Error, OSError, ValueError):
            return None
        for parent in parents:
            if parent.pid in sessions:
                return sessions[parent.pid]
            psid = _sid(parent.pid)
            if psid is not None and psid in sessions:
                return sessions[psid]
        return None
    except Exception:  # noqa: BLE001 - the GPU panel must not crash on a racing process
        return None


def owner_map(phase_sessions: Mapping[int, str]) -> Callable[[int], str | None]:
    """A `pid -> phase id | None` lookup over a fixed set of sessions that remembers its
    answers; make a new one per refresh so a reused pid is looked up afresh."""
    sessions = dict(phase_sessions)
    # Callers may hold the phase process's pid rather than its launcher's: the session of
    # that process (the launcher's pid) names the phase just the same.
    for pid, phase in list(sessions.items()):
        sid = _sid(pid)
        if sid is not None and sid > 1:
            sessions.setdefault(sid, phase)
    cache: dict[int, str | None] = {}

    def owner(pid: int) -> str | None:
        if pid not in cache:
            cache[pid] = phase_of_pid(pid, sessions)
        return cache[pid]

    return owner
