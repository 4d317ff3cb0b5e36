"""Stall detection: durations, the per-phase default, and one journaled alert per silence."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from console.core.lifecycle.snapshot import SnapshotBuilder
from console.core.lifecycle.stall import DEFAULT_STALL_AFTER, StallWatch, parse_duration, silence, stall_after
from console.core.lifecycle.state import PhaseStatus
from console.core.model.config import Phase
from console.core.records.journal import Journal
from console.core.runs.rundir import RunDir


@pytest.mark.parametrize("text,secs", [(90, 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400),
                                       ("off", 0), ("0", 0), ("1.5m", 90),
                                       ("8m30s", 510), ("2h03m", 7380), ("1d2h", 93600), ("1h 5s", 3605)])
def test_durations(text, secs) -> None:  # type: ignore[no-untyped-def]
    assert parse_duration(text) == secs


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", "-1s", "40d", True, "30s8m", "1.5m30s",
                                 "m", "8m30", "29d24h1m"])
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
    # The started run's process: idle, in a session of its own (as a launcher's phase is).
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)  # wait-ok: the run's own work
    try:
        starting = PhaseStatus(phase=phase, state="running", run=RunDir(tmp_path / "r"), started_at=created)
        started = PhaseStatus(phase=phase, state="running", run=RunDir(tmp_path / "r"), started_at=created,
                              pid=idle.pid)
        views = [SnapshotBuilder(SimpleNamespace(statuses=lambda checks=None, st=st: [st])).build().phases[0]
                 for st in (starting, started)]
    finally:
        idle.kill()
        idle.wait()
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


# A working phase's loop: 10 ms of CPU, then a 40 ms rest. At most a fifth of a core, and on a
# loaded machine still well above BUSY_SHARE (5 %): a spinning loop took whatever the scheduler
# gave it, twice over, for the whole test.
WORKING = "t = time.process_time()\\n    while time.process_time() - t < 0.01: pass\\n    time.sleep(0.04)"  # wait-ok: the phase's own work

FIRST_UNIT_CFG = """\
name: first
vars: {work: ./work}
state_dir: ${work}/state
phases:
  - id: busy
    stall_after: 1s
    run: [python3, -c, "import os, time\\nwhile not os.path.exists('work/stop'):\\n    """ + WORKING + """"]
  - id: idle
    stall_after: 1s
    run: [python3, -c, "import os, time\\nwhile not os.path.exists('work/stop'): time.sleep(0.05)"]  # wait-ok: the phase's own work
""" + "".join(f"""\
  - id: {pid}
    stall_after: 1s
    run:
      - python3
      - -c
      - |
        import json, os, time
        with open(os.environ['EAGLE3_EVENTS'], 'a') as f:
            f.write(json.dumps({{'t': {t}, 'kind': 'progress', 'done': 1, 'total': 9}}) + '\\n')
        while not os.path.exists('work/stop'):
            {work}
""" for pid, t, work in (("counted", "time.time()", WORKING.replace("\\n", "\n        ")),
                        ("ahead", "time.time() + 86400", "time.sleep(0.05)  # wait-ok: the phase's own work")))


def _views_until(project, phase_id: str, silent_for: float) -> list:  # type: ignore[no-untyped-def]
    """Looks at a running phase, as a console does, until it has been silent `silent_for` s."""
    builder = SnapshotBuilder(project)
    views: list = []

    def silent_enough():  # type: ignore[no-untyped-def]
        pv = next(v for v in builder.build().phases if v.id == phase_id)
        views.append(pv)
        return pv.status.state == "running" and (pv.silent_s or 0) >= silent_for

    from core_harness import wait_for

    wait_for(silent_enough, timeout=60, what=f"{phase_id} silent for {silent_for}s")
    return views


def test_a_phase_busy_before_its_first_unit_is_not_called_stalled(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """A long first batch (regenerate on a CPU: 10 minutes before its first record) prints
    nothing and reports nothing, but works: its processes use CPU. Before its first unit,
    a silent phase counts as stalled only when its processes are idle too."""
    from console.core.lifecycle.project import Project

    (tmp_path / "work").mkdir()
    cfg = tmp_path / "first.yaml"
    cfg.write_text(FIRST_UNIT_CFG)
    monkeypatch.chdir(tmp_path)
    project = Project.load(cfg)
    try:
        for pid in ("busy", "idle", "counted"):
            project.start(pid)
        busy = _views_until(project, "busy", 3.0)
        assert not any(v.stalled for v in busy), [(v.silent_s, v.stalled) for v in busy]
        assert busy[-1].awaiting_first_unit
        from console.cli import main

        capsys.readouterr()
        main(["status", str(cfg)])
        assert "working on its first unit: silent for" in capsys.readouterr().out  # what status says instead
        idle = _views_until(project, "idle", 3.0)
        assert idle[-1].stalled and not idle[-1].awaiting_first_unit  # silent and idle: stalled
        counted = _views_until(project, "counted", 3.0)
        assert counted[-1].stalled  # it has reported a unit: silence alone is a stall, as before
    finally:
        (tmp_path / "work" / "stop").touch()
        for pid in ("busy", "idle", "counted"):
            project.stop(pid, grace=2)


def test_a_future_stamped_event_is_a_stall_for_status_as_it_is_for_the_console(
        tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """A phase whose clock runs a day ahead reports once, then falls silent. The console (which
    has watched since the start) flags the stall; a one-shot `eagle3 status --json` read the
    event for the first time and called it a moment old: not stalled."""
    import json

    from console.cli import main
    from console.core.lifecycle.project import Project

    (tmp_path / "work").mkdir()
    cfg = tmp_path / "first.yaml"
    cfg.write_text(FIRST_UNIT_CFG)
    monkeypatch.chdir(tmp_path)
    project = Project.load(cfg)
    try:
        project.start("ahead")
        console = _views_until(project, "ahead", 2.0)
        assert console[-1].stalled and console[-1].live.done == 1
        capsys.readouterr()
        main(["status", str(cfg), "--json"])
        view = next(p for p in json.loads(capsys.readouterr().out)["phases"] if p["phase"] == "ahead")
        assert view["state"] == "running" and view["stalled"] is True, view
        assert view["silent_s"] >= 2.0 and view["progress"]["last_progress_t"] <= time.time()
        main(["status", str(cfg)])
        assert "⚠ stalled" in capsys.readouterr().out
    finally:
        (tmp_path / "work" / "stop").touch()
        project.stop("ahead", grace=2)
