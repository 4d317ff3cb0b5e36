"""Stall detection: durations, the per-phase default, and one journaled alert per silence."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from console.core.config.model import Phase
from console.core.journal import Journal
from console.core.runs.rundir import RunDir
from console.core.snapshot import SnapshotBuilder
from console.core.stall import DEFAULT_STALL_AFTER, StallWatch, parse_duration, silence, stall_after
from console.core.state import PhaseStatus


@pytest.mark.parametrize("text,secs", [(90, 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400),
                                       ("off", 0), ("0", 0), ("1.5m", 90)])
def test_durations(text, secs) -> None:  # type: ignore[no-untyped-def]
    assert parse_duration(text) == secs


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", "-1s", "40d", True])
def test_bad_durations_say_what_was_expected(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_tasks_are_watched_by_default_services_only_when_asked() -> None:
    assert stall_after(Phase(id="a", title="a", argv=("x",))) == DEFAULT_STALL_AFTER
    assert stall_after(Phase(id="s", title="s", argv=("x",), kind="service")) == 0
    assert stall_after(Phase(id="s", title="s", argv=("x",), kind="service", stall_after=60)) == 60


def test_silence_counts_from_the_latest_sign_of_life() -> None:
    assert silence(100.0, 10.0, 40.0, 70.0) == 30.0
    assert silence(100.0, None, None, None) is None


def test_a_run_whose_launcher_is_still_starting_is_not_silent(tmp_path: Path) -> None:
    """Its launcher has not written its pid yet (a loaded host, a slow interpreter): the phase
    has not started, so its silence, and a stall, count only from the launcher's start."""
    phase = Phase(id="q", title="q", argv=("x",), stall_after=1.0)
    created = time.time() - 60
    starting = PhaseStatus(phase=phase, state="running", run=RunDir(tmp_path / "r"), started_at=created)
    started = PhaseStatus(phase=phase, state="running", run=RunDir(tmp_path / "r"), started_at=created,
                          pid=os.getpid())
    views = [SnapshotBuilder(SimpleNamespace(statuses=lambda checks=None, st=st: [st])).build().phases[0]
             for st in (starting, started)]
    assert [(v.silent_s is None, v.stalled) for v in views] == [(True, False), (False, True)]


def _view(stalled: bool, run_id: str = "r1", state: str = "running", silent_s: float = 700.0) -> SimpleNamespace:
    st = SimpleNamespace(phase=SimpleNamespace(id="extract"), run=SimpleNamespace(run_id=run_id), state=state)
    return SimpleNamespace(status=st, stalled=stalled, silent_s=silent_s, stall_after=600.0)


def test_one_alert_per_silence_journaled_and_again_after_it_speaks(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    watch = StallWatch(journal)
    assert [a.phase_id for a in watch.update([_view(True)], now=1000.0)] == ["extract"]
    assert watch.update([_view(True, silent_s=701.0)], now=1001.0) == []  # still silent: no second alert
    assert StallWatch(journal).update([_view(True, silent_s=702.0)], now=1002.0) == []  # another console
    assert watch.update([_view(False, silent_s=5.0)], now=1010.0) == []  # it spoke
    assert StallWatch(journal).update([_view(True, silent_s=702.0)], now=1002.0) == []  # a look from before
    assert len(watch.update([_view(True, silent_s=610.0)], now=1615.0)) == 1  # silent again: alerted again
    events = [r["event"] for r in journal.read(phase="extract")]
    assert events == ["stalled", "stall_cleared", "stalled"]
    assert "no progress event and no log line" in journal.read(events={"stalled"})[0]["message"]
