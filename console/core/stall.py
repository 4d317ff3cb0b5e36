"""Stall detection: a running phase whose progress events and log have both been silent
for `stall_after` seconds. A hung NCCL collective or a wedged server prints nothing and
exits nothing; without this an operator finds it hours late.

`StallWatch.update(snapshot)` returns the phases that just went silent (once per silence)
and journals each as `stalled`; when the phase speaks again it journals `stall_cleared`,
and a later silence alerts again. A task phase gets `DEFAULT_STALL_AFTER` unless its config
says otherwise; a service is quiet while idle, so it is watched only when `stall_after` is
set on it. `stall_after: 0` (or `off`) turns the watch off for a phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.core.durations import MAX_DURATION, format_duration, parse_duration

__all__ = ["DEFAULT_STALL_AFTER", "MAX_DURATION", "StallAlert", "StallWatch", "parse_duration", "silence",
           "stall_after"]

DEFAULT_STALL_AFTER = 600.0  # 10 minutes: extraction reports every 2 s, training every step


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
    """Remembers which runs were alerted, so each silence alerts once."""

    def __init__(self, journal: Any | None = None) -> None:
        self.journal = journal
        self._alerted: set[tuple[str, str]] = set()

    def update(self, phases: Any) -> list[StallAlert]:
        """`phases`: items with `.status` (PhaseStatus), `.stalled`, `.silent_s`, `.stall_after`
        (the snapshot's PhaseView). New alerts, journaled."""
        out: list[StallAlert] = []
        live: set[tuple[str, str]] = set()
        for pv in phases:
            st = pv.status
            if st.run is None:
                continue
            key = (st.phase.id, st.run.run_id)
            if pv.stalled:
                live.add(key)
                if key not in self._alerted and not self._journaled(key):
                    self._alerted.add(key)
                    alert = StallAlert(st.phase.id, st.run.run_id, pv.silent_s or 0.0, pv.stall_after)
                    out.append(alert)
                    self._append("stalled", alert)
                else:
                    self._alerted.add(key)
        for key in list(self._alerted):
            if key not in live:
                self._alerted.discard(key)
                running = any(pv.status.phase.id == key[0] and pv.status.run is not None
                              and pv.status.run.run_id == key[1] and pv.status.state == "running"
                              for pv in phases)
                if running and self.journal is not None:
                    self.journal.append("stall_cleared", phase=key[0], run_id=key[1])
        return out

    def _journaled(self, key: tuple[str, str]) -> bool:
        """Another console (or an earlier one) already journaled this silence."""
        if self.journal is None:
            return False
        try:
            recent = self.journal.read(phase=key[0], limit=20)
        except Exception:  # noqa: BLE001 - an unreadable journal must not hide a stall
            return False
        for rec in reversed(recent):
            if rec.get("run_id") != key[1]:
                continue
            if rec.get("event") == "stall_cleared":
                return False
            if rec.get("event") == "stalled":
                return True
        return False

    def _append(self, event: str, alert: StallAlert) -> None:
        if self.journal is None:
            return
        try:
            self.journal.append(event, phase=alert.phase_id, run_id=alert.run_id,
                                silent_s=round(alert.silent_s, 1), stall_after=alert.stall_after,
                                message=alert.summary)
        except Exception:  # noqa: BLE001 - the alert still shows when the journal cannot take it
            pass
