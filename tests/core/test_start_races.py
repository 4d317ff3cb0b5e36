"""Two starts at once in one project: a phase is never started beside a rerun of the phase it
needs, whichever start comes second."""

from __future__ import annotations

import io
import sys
import threading

from core_harness import config_for

from console.core.flow.waiting import wait
from console.core.lifecycle.project import Project
from console.core.model.config import Phase
from console.core.runs import manager
from console.core.text.errors import Eagle3Error

WAIT_S = 5.0  # how long b's start lingers before launching, for a rerun of a to slip in


def test_a_rerun_of_a_phase_beside_the_start_of_one_that_needs_it_starts_only_one(tmp_path, monkeypatch):
    """b's start has passed its needs check (a is done) and is about to launch when a rerun of
    a comes: whichever goes second must see the other's run, never both start."""
    config = config_for(tmp_path, Phase(id="a", title="a", argv=(sys.executable, "-c", "pass")),
                        Phase(id="b", title="b", argv=(sys.executable, "-c", "import time; time.sleep(120)"),  # wait-ok: the phase body runs long, the test does not wait on it
                              needs=("a",)))
    project = Project(config)
    first = project.start("a")
    assert wait(project, config.phase("a"), first, io.StringIO(), timeout=60).outcome == "done"
    real = manager.start_run
    b_checked, a_started = threading.Event(), threading.Event()

    def hooked(config, phase, *a, **kw):  # type: ignore[no-untyped-def]
        if phase.id == "b":
            b_checked.set()
            a_started.wait(WAIT_S)  # wait-ok: a rerun that is not held off starts here
            return real(config, phase, *a, **kw)
        rd = real(config, phase, *a, **kw)
        a_started.set()
        return rd

    monkeypatch.setattr(manager, "start_run", hooked)
    outcome: dict[str, str] = {}

    def start(pid: str) -> None:
        try:
            Project(config).start(pid)
            outcome[pid] = "started"
        except Eagle3Error as e:
            outcome[pid] = str(e)

    b = threading.Thread(target=start, args=("b",))
    b.start()
    try:
        assert b_checked.wait(60)
        start("a")
        b.join(120)
        assert list(outcome.values()).count("started") == 1, outcome
        assert outcome["b"] == "started" and "b needs a and is running" in outcome["a"], outcome
    finally:
        b.join(120)
        for pid in ("a", "b"):
            project.stop(pid, grace=5)
