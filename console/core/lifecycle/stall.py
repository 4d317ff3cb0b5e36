"""Stall detection: a running phase whose progress events and log have both been silent
for `stall_after` seconds. A hung NCCL collective or a wedged server prints nothing and
exits nothing; without this an operator finds it hours late.

`StallWatch.update(snapshot)` journals each silence once as `stalled` and sends its `stalled`
notification, whichever process (the run's launcher, a console) sees it first; when the phase
speaks again it journals `stall_cleared`, and a later silence alerts again. A task phase gets
`DEFAULT_STALL_AFTER` unless its config says otherwise; a service is quiet while idle, so it is
watched only when `stall_after` is set on it. `stall_after: 0` (or `off`) turns the watch off
for a phase.

Before a phase has reported its first unit (no progress event with `done` above 0 yet),
silence alone is no stall: a long first batch (a model loading, regenerate's first record on a
CPU) reports nothing for minutes while it works. Then a silent phase is stalled only when its
processes are idle too (`FirstUnitWatch`: under `BUSY_SHARE` of a core since the last look).
A hang that spins a core before the first unit (some collectives busy-wait) is not caught
until `stall_after` passes after the first unit; a phase's progress events shorten that.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

from console.core.lifecycle.notify import claim, claims_dir
from console.core.lifecycle.state import State
from console.core.text.durations import MAX_DURATION, format_duration, parse_duration

__all__ = ["DEFAULT_STALL_AFTER", "MAX_DURATION", "FirstUnitWatch", "StallAlert", "StallWatch", "first_unit_reported",
           "parse_duration", "silence", "stall_after"]

BUSY_SHARE = 0.05  # of one core: a phase's processes using more than this are working
DEFAULT_STALL_AFTER = 600.0  # 10 minutes: extraction reports every 2 s, training every step
SAME_LIFE = 0.01  # seconds: two looks at one silence agree on its last sign of life to within this


def stall_after(phase: Any) -> float:
    """The silence (seconds) after which `phase` counts as stalled; 0 = never."""
    configured = getattr(phase, "stall_after", None)
    if configured is not None:
        return float(configured)
    return DEFAULT_STALL_AFTER if getattr(phase, "kind", "task") == "task" else 0.0


def silence(now: float, started_at: float | None, last_event_t: float | None,
            log_mtime: float | None) -> float | None:
    """Seconds since the run last showed a sign of life (start, an event, a log write)."""
    signs = [t for t in (started_at, last_event_t, log_mtime) if t is not None]
    return max(0.0, now - max(signs)) if signs else None


def session_cpu(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, seconds alive) of the processes in `pid`'s session (the run's: its
    launcher leads it) but the leader, which only watches; None when there are none. A
    scan of the process table: call it only for a phase that would otherwise be stalled."""
    try:
        sid = os.getsid(pid)
    except OSError:
        return None
    cpu = alive = 0.0
    found = False
    now = time.time()
    for p in psutil.process_iter():
        try:
            if p.pid == sid or os.getsid(p.pid) != sid:
                continue
            t = p.cpu_times()
            cpu += t.user + t.system + t.children_user + t.children_system
            alive = max(alive, now - p.create_time())
            found = True
        except (psutil.Error, OSError):
            continue
    return (cpu, alive) if found else None


class FirstUnitWatch:
    """Whether a run that has not reported its first unit is working: its processes' CPU
    over at least `SAMPLE_S` between looks (on the first look, since they started; CPU
    time moves in ticks, and a loaded host schedules a busy process in bursts, so looks a
    few milliseconds apart would flap). One per snapshot builder."""

    SAMPLE_S = 2.0

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, float, bool]] = {}  # run id -> (monotonic t, CPU s, verdict)

    def busy(self, run_id: str, pid: int | None) -> bool:
        """`pid`: the run's phase or launcher process."""
        now = time.monotonic()
        last = self._seen.get(run_id)
        if last is not None and now - last[0] < self.SAMPLE_S:
            return last[2]
        found = session_cpu(pid) if pid else None
        if found is None:
            self._seen.pop(run_id, None)
            return False
        cpu, alive = found
        if last is None:
            verdict = alive > 0 and cpu / alive >= BUSY_SHARE
        else:
            verdict = (cpu - last[1]) / (now - last[0]) >= BUSY_SHARE
        self._seen[run_id] = (now, cpu, verdict)
        return verdict


def first_unit_reported(live: Any) -> bool:
    done = getattr(live, "done", None) if live is not None else None
    return done is not None and done > 0


@dataclass(frozen=True)
class StallAlert:
    phase_id: str
    run_id: str
    silent_s: float
    stall_after: float

    @property
    def summary(self) -> str:
        return (f"{self.phase_id} stalled: no progress event and no log line for "
                f"{format_duration(self.silent_s)} (stall_after {format_duration(self.stall_after)})")


class StallWatch:
    """Journals each silence once as `stalled`, and sends its `stalled` notification once,
    whichever process sees it first: the run's launcher watches its own run, and any number
    of consoles watch too. The run's `claims/` folder holds the silences: `stalled.<n>` (its
    text: the time of the last sign of life before it) and `stall_cleared.<n>` once the run
    spoke after it. Each process also remembers the silences it handled, so one that cannot
    write claims alerts at most once a silence."""

    def __init__(self, journal: Any, notifier: Any | None = None) -> None:
        self.journal = journal
        self.notifier = notifier
        self._handled: dict[tuple[str, str], float] = {}  # (phase, run) -> its silence's last sign of life

    def update(self, phases: Any, now: float | None = None) -> list[StallAlert]:
        """`phases`: items with `.status` (PhaseStatus), `.stalled`, `.silent_s`, `.stall_after`
        (the snapshot's PhaseView); `now`: the time their `silent_s` was measured at (the
        snapshot's `t`). The silences this call claimed: journaled and sent."""
        now = time.time() if now is None else now
        out: list[StallAlert] = []
        for pv in phases:
            st = pv.status
            if st.run is None or st.state != State.RUNNING or pv.silent_s is None:
                continue
            alert = self._look(pv, st.phase.id, st.run.run_id, now - pv.silent_s)
            if alert is not None:
                out.append(alert)
        return out

    def _look(self, pv: Any, phase_id: str, run_id: str, life: float) -> StallAlert | None:
        """`life`: when the run last showed a sign of life."""
        state = _Silences(self._state_dir(), phase_id, run_id)
        if state.declared is not None and life > state.declared + SAME_LIFE:
            if state.claim_clear():  # it spoke after the silence on record
                self._record("stall_cleared", phase=phase_id, run_id=run_id)
            state.next()
        key = (phase_id, run_id)
        if not pv.stalled or state.claimed or life <= self._handled.get(key, float("-inf")) + SAME_LIFE:
            return None
        if state.previous is not None and life <= state.previous + SAME_LIFE:
            return None  # a stale look at a silence already cleared
        self._handled[key] = life
        if not state.claim(life):
            return None
        alert = StallAlert(phase_id, run_id, pv.silent_s or 0.0, pv.stall_after)
        self._record("stalled", phase=phase_id, run_id=run_id, silent_s=round(alert.silent_s, 1),
                     stall_after=alert.stall_after, message=alert.summary)
        if self.notifier is not None:
            self.notifier.fire("stalled", phase_id, "running", run_id, alert.summary, claimed=True)
        return alert

    def _state_dir(self) -> Any:
        return getattr(self.journal, "state_dir", None)

    def _record(self, event: str, **fields: Any) -> None:
        if self.journal is None:
            return
        try:
            self.journal.append(event, **fields)
        except Exception:  # noqa: BLE001 - the alert still goes out when the journal cannot take it
            pass


class _Silences:
    """One run's silences on disk, as they stand at one look."""

    def __init__(self, state_dir: Any, phase_id: str, run_id: str) -> None:
        self.where = (state_dir, phase_id, run_id)
        try:
            self.names = set(os.listdir(claims_dir(*self.where))) if state_dir is not None else set()
        except OSError:
            self.names = set()
        self.n = 0
        while f"stall_cleared.{self.n}" in self.names:
            self.n += 1
        self.previous = self._life(self.n - 1) if self.n else None
        self.claimed = f"stalled.{self.n}" in self.names
        self.declared = self._life(self.n) if self.claimed else None

    def _life(self, n: int) -> float | None:
        try:
            return float((claims_dir(*self.where) / f"stalled.{n}").read_text())
        except (OSError, ValueError):
            return None  # being written: the next look reads it

    def claim(self, life: float) -> bool:
        if self.where[0] is None:
            return True
        return claim(*self.where, f"stalled.{self.n}", note=repr(life))

    def claim_clear(self) -> bool:
        return self.where[0] is None or claim(*self.where, f"stall_cleared.{self.n}")

    def next(self) -> None:
        self.previous, self.declared, self.claimed = self.declared, None, False
        self.n += 1
