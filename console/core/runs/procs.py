"""Process identity and teardown for detached phases.

A pid alone does not name a process for long: after a reboot or a busy week the same
number belongs to someone else. A process is identified by (pid, start time), and the
start time is the raw /proc value (clock ticks since boot), compared exactly, so the
writer and the reader never disagree through float rounding or a boot-time estimate.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Iterable

import psutil


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from field 3 (state) on; the command name in field 2
    may hold spaces and parentheses, so split after its last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    end = raw.rfind(")")
    if end < 0:
        return None
    return raw[end + 2:].split()


def start_time(pid: int) -> float | None:
    """The process's start time (raw, comparable only with itself), or None when no such
    process exists."""
    if pid <= 0:
        return None
    if os.path.isdir("/proc/self"):
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 20:
            return None
        return float(fields[19])  # field 22, starttime
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] in ("Z", "X")
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def alive(pid: int | None, start: float | None) -> bool:
    """True when `pid` is a live (not zombie) process that started at `start`: a pid that
    was reused by another process is not alive for us."""
    if not pid or start is None:
        return False
    now = start_time(pid)
    if now is None or now != float(start):
        return False
    return not _is_zombie(pid)


def gone(pid: int) -> bool:
    """No such process, or only its zombie (which holds nothing and runs nothing)."""
    return not psutil.pid_exists(pid) or _is_zombie(pid)


def _group_members(pgid: int, sid: int | None) -> list[psutil.Process]:
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid or (sid is not None and os.getsid(pid) == sid):
                found.append(psutil.Process(pid))
        except (ProcessLookupError, PermissionError, psutil.Error, OSError):
            continue
    return found


def with_env(key: str, value: str) -> list[psutil.Process]:
    """Processes of ours whose environment has key=value: the mark every process of a run
    inherits, even one that double-forked and left the session."""
    found = []
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            if p.environ().get(key) == value:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def _snapshot(pgid: int, sid: int | None, spare: Collection[int],
              extra: Iterable[psutil.Process]) -> dict[int, psutil.Process]:
    procs: dict[int, psutil.Process] = {}
    roots = _group_members(pgid, sid) + list(extra)
    for p in roots:
        procs[p.pid] = p
        try:
            for c in p.children(recursive=True):
                procs[c.pid] = c
        except psutil.Error:
            continue
    for pid in set(spare) | {os.getpid()}:
        procs.pop(pid, None)
    return procs


def _signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            if p.is_running():  # checks the pid still names the same process
                p.send_signal(sig)
        except psutil.Error:
            continue


def signal_group(pgid: int, sig: int) -> None:
    """`sig` to every process of group `pgid`; a group already gone, or not ours to signal,
    is not an error: whoever asked wanted it ended."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_signal(pgid: int, sig: int, members: dict[int, psutil.Process], spare: Collection[int]) -> None:
    if any(_safe_pgid(s) == pgid for s in spare):
        _signal_all((p for p in members.values() if _safe_pgid(p.pid) == pgid), sig)
        return
    signal_group(pgid, sig)


def _safe_pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None


def _ended(p: psutil.Process) -> bool:
    """Exited (a zombie counts), judged by (pid, create time) so a reused pid is not waited on."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(procs: Iterable[psutil.Process], timeout: float, reap: bool = True) -> list[psutil.Process]:
    """Wait until each process has exited (reaping our own children unless `reap` is off);
    return the rest."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        if reap:
            _, procs = psutil.wait_procs(procs, timeout=0)
        procs = [p for p in procs if not _ended(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(0.05)


STOP_GRACE = 10.0  # seconds a stop waits between SIGTERM and SIGKILL (the console's `s`, `eagle3 stop`)


def kill_group(pgid: int, grace: float = STOP_GRACE, *, sid: int | None = None,
               spare: Collection[int] = (), extra: Iterable[psutil.Process] = (), reap: bool = True) -> None:
    """Stop a process group and everything it spawned: SIGTERM, then SIGKILL after `grace`.

    Descendants are snapshotted before any signal, so one that moved to its own group or
    session (setsid) is still found after its parent died and it was reparented. `sid`
    adds every member of that session; `extra` adds processes found some other way;
    `spare` names pids never signalled (the launcher that must live to record the end).
    Processes spawned during the grace period are caught by a second snapshot. `reap` off:
    our own children are left to their `wait()` (the launcher's, which records the code)."""
    spare = set(spare)
    procs = _snapshot(pgid, sid, spare, extra)
    _group_signal(pgid, signal.SIGTERM, procs, spare)
    # One SIGTERM each: many programs take a second one as "quit now, skip the cleanup".
    _signal_all((p for p in procs.values() if _safe_pgid(p.pid) != pgid), signal.SIGTERM)
    left = _wait_gone(procs.values(), grace, reap)
    late = _snapshot(pgid, sid, spare, left)
    if not left and not late:
        return
    procs = {**{p.pid: p for p in left}, **late}
    _group_signal(pgid, signal.SIGKILL, procs, spare)
    _signal_all(procs.values(), signal.SIGKILL)
    _wait_gone(procs.values(), 5.0, reap)
