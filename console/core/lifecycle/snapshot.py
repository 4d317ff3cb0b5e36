"""One picture of a project at an instant: every phase's state, the live figures of its
run (from its events), how long it has been silent, and whether that counts as a stall.
The console and `eagle3 status --json` both read this, so they never disagree.

`SnapshotBuilder` keeps what must persist between looks (an `EventTail` per run, so the
events file is read by offset and never twice) and is meant for one poller thread.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from console.core.checks.result import CheckResult
from console.core.lifecycle.livestats import EventTail, LiveSnapshot
from console.core.lifecycle.stall import FirstUnitWatch, first_unit_reported, silence, stall_after
from console.core.lifecycle.state import LIVE, PhaseStatus, State


@dataclass(frozen=True)
class SpaceNeed:
    """Bytes running phases still have to write on one volume (from their events)."""

    bytes: int
    phases: tuple[str, ...]


@dataclass
class PhaseView:
    status: PhaseStatus
    live: LiveSnapshot | None = None
    launcher_pid: int | None = None  # the phase's session id (GPU ownership)
    silent_s: float | None = None
    stall_after: float = 0.0
    stalled: bool = False
    awaiting_first_unit: bool = False  # silent past stall_after, but working on its first unit

    @property
    def id(self) -> str:
        return self.status.phase.id

    def to_json(self) -> dict[str, Any]:
        d = self.status.to_json()
        d["stalled"] = self.stalled
        d["silent_s"] = None if self.silent_s is None else round(self.silent_s, 1)
        d["stall_after_s"] = self.stall_after
        d["awaiting_first_unit"] = self.awaiting_first_unit
        d["progress"] = None if self.live is None else live_json(self.live)
        return d


def live_json(s: LiveSnapshot) -> dict[str, Any]:
    return {
        "done": s.done, "total": s.total, "unit": s.unit,
        "fraction": None if s.fraction is None else round(s.fraction, 4),
        "rate_per_s": None if s.rate is None else float(f"{s.rate:.4g}"),  # 0.0004 stays 0.0004
        "failed": s.failed,
        "eta_s": None if s.eta_s is None else round(s.eta_s, 1),
        "bytes_written": s.bytes_written, "bytes_remaining": s.remaining_bytes,
        "tokens_per_s": s.tokens_per_s, "last_progress_t": s.last_progress_t,
        "metrics": {k: v[-1] for k, v in s.metrics.items() if v},
        "last_message": None if s.last_message is None else
        {"t": s.last_message.t, "level": s.last_message.level, "text": s.last_message.text},
    }


@dataclass
class Snapshot:
    t: float
    phases: list[PhaseView] = field(default_factory=list)

    @property
    def statuses(self) -> list[PhaseStatus]:
        return [p.status for p in self.phases]

    @property
    def by_id(self) -> dict[str, PhaseView]:
        return {p.id: p for p in self.phases}

    @property
    def stats(self) -> dict[str, LiveSnapshot]:
        return {p.id: p.live for p in self.phases if p.live is not None}

    def sessions(self) -> dict[int, str]:
        """{launcher pid (= the phase's session id): phase id} of the running phases."""
        return {p.launcher_pid: p.id for p in self.phases
                if p.status.state in LIVE and p.launcher_pid}

    def to_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.phases]


def _mtime(path: Any) -> float | None:
    try:
        return os.stat(path).st_mtime
    except (OSError, TypeError, ValueError):
        return None


class SnapshotBuilder:
    def __init__(self, project: Any, clock: Callable[[], float] = time.time) -> None:
        self.project = project
        self.clock = clock
        self._tails: dict[str, EventTail] = {}
        self._frozen: dict[str, LiveSnapshot] = {}
        self._first_unit = FirstUnitWatch()

    def build(self, checks: Mapping[str, list[CheckResult]] | None = None) -> Snapshot:
        statuses = self.project.statuses(checks=dict(checks or {}))
        now = self.clock()
        out = Snapshot(t=now)
        for st in statuses:
            pv = PhaseView(status=st, stall_after=stall_after(st.phase))
            run = st.run
            if run is not None:
                pv.live = self._live(st)
                if st.state in LIVE:
                    info = run.read_pid()
                    pv.launcher_pid = info.pid if info is not None else None
                if st.state == State.RUNNING and st.pid is not None:  # no pid: its launcher is starting
                    last_t = pv.live.last_progress_t if pv.live is not None else None
                    pv.silent_s = silence(now, st.started_at, _last_event_t(pv.live, last_t),
                                          _mtime(run.output_log))
                    pv.stalled = bool(pv.stall_after and pv.silent_s is not None
                                      and pv.silent_s >= pv.stall_after)
                    if pv.stalled and not first_unit_reported(pv.live) and self._first_unit.busy(run.run_id, st.pid):
                        pv.stalled, pv.awaiting_first_unit = False, True
            out.phases.append(pv)
        return out

    def _live(self, st: PhaseStatus) -> LiveSnapshot | None:
        run = st.run
        assert run is not None
        key = str(run.events_jsonl)
        pid = st.phase.id
        tail = self._tails.get(pid)
        if tail is None or tail.path != key:
            tail = self._tails[pid] = EventTail(key)
            self._frozen.pop(pid, None)
        elif st.state not in LIVE and pid in self._frozen:
            return self._frozen[pid]
        tail.poll()
        snap = tail.stats.snapshot()
        if st.state not in LIVE:
            # An ended run has no rate and no ETA: its numbers describe what it did.
            snap = replace(snap, rate=None, eta_s=None, tokens_per_s=None, remaining_bytes=None, ended=True)
            self._frozen[pid] = snap
        return snap

    def space_needs(self, snap: Snapshot, volume_for: Callable[[Any], str | None]) -> dict[str, SpaceNeed]:
        """{volume: SpaceNeed} for running phases that report bytes still to write; a
        phase counts on the volume of its first output that lies on a watched volume."""
        needs: dict[str, SpaceNeed] = {}
        for pv in snap.phases:
            live = pv.live
            if pv.status.state not in LIVE or live is None or not live.remaining_bytes:
                continue
            for out in pv.status.phase.outputs:
                vol = volume_for(self.project.config.resolve(out))
                if vol is not None:
                    prev = needs.get(vol)
                    needs[vol] = SpaceNeed((prev.bytes if prev else 0) + int(live.remaining_bytes),
                                           (prev.phases if prev else ()) + (pv.id,))
                    break
        return needs


def _last_event_t(live: LiveSnapshot | None, progress_t: float | None) -> float | None:
    if live is None:
        return progress_t
    times = [t for t in (progress_t, live.last_message.t if live.last_message else None) if t is not None]
    return max(times) if times else None
