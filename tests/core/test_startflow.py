"""The start flow as data, which the console's dialogs and the CLI's flags both answer:
each question comes back as a result, each answer makes the next request, and what the
operator decided (an override and its reason, a confirmation) lands in the journal."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest
from core_harness import wait_for

from console.core.flow.runall import AllDone, Entering, Halted, Skipped, run_all
from console.core.flow.startflow import (
    AlreadyLive,
    BlockedStart,
    ConfirmationNeeded,
    Refused,
    RerunNeeded,
    Started,
    StartRequest,
    attempt,
    drive,
    step,
)
from console.core.flow.waiting import wait
from console.core.flow.watch import PhaseWatch
from console.core.lifecycle.project import Project

CFG = textwrap.dedent("""\
    name: flow
    vars:
      work: ./work
    state_dir: ${work}/state
    phases:
      - id: make
        run: [python, -c, "open('work/made.txt', 'w').write('x')"]
        outputs: [${work}/made.txt]
      - id: use
        needs: [make]
        run: [python, -c, "print('used')"]
      - id: guarded
        run: [python, -c, "print('guarded ran')"]
        checks:
          - exists: ${work}/approval.txt
            name: approval
      - id: wipe
        confirm: true
        run: [python, -c, "import shutil; shutil.rmtree('work/old')"]
        deletes: ["${work}/old"]
      - id: held
        run: [python, -c, "import os, time\\nwhile not os.path.exists('work/go'): time.sleep(0.05)"]  # wait-ok: the phase's own work, until the test lets it end
    """)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    (tmp_path / "work").mkdir()
    cfg = tmp_path / "flow.yaml"
    cfg.write_text(CFG)
    monkeypatch.chdir(tmp_path)  # the phases' relative paths
    return Project.load(cfg)


def _events(project: Project, phase: str, event: str) -> list[dict]:
    return project.journal.read(phase=phase, events={event})


def _finish(project: Project, result: object) -> None:
    assert isinstance(result, Started), result
    phase = project.config.phase(result.request.phase_id)
    assert wait(project, phase, result.run, io.StringIO(), timeout=30).outcome == "done"


def test_a_start_whose_checks_pass_is_started_with_the_checks_it_passed(project: Project) -> None:
    result = step(project, StartRequest("make"))
    assert isinstance(result, Started)
    assert result.run.run_id == project.run_dir("make").run_id
    assert [r.name for r in result.checks or []] == ["needs-done"]
    _finish(project, result)


def test_failing_checks_block_the_start_and_an_override_with_a_reason_is_journaled(project: Project) -> None:
    blocked = step(project, StartRequest("guarded"))
    assert isinstance(blocked, BlockedStart)
    assert [r.name for r in blocked.failing] == ["approval"]
    assert {r.name for r in blocked.results} == {"needs-done", "approval"}
    assert project.run_dir("guarded") is None
    assert _events(project, "guarded", "checks")[-1]["passed"] is False
    assert blocked.answer(None) is None and blocked.answer({}) is None  # no override: the start ends

    follow = blocked.answer({"approval": "signed off on paper"})
    assert follow is not None and follow.overrides == {"approval": "signed off on paper"}
    started = step(project, follow)
    assert isinstance(started, Started)
    [override] = _events(project, "guarded", "override")
    assert (override["check"], override["reason"]) == ("approval", "signed off on paper")
    _finish(project, started)


def test_a_destructive_phase_is_confirmed_before_its_checks_run_once(project: Project) -> None:
    (Path("work") / "old").mkdir()
    (Path("work") / "old" / "a.bin").write_bytes(b"x" * 3000)
    question = step(project, StartRequest("wipe"))
    assert isinstance(question, ConfirmationNeeded)
    assert "deletes:" in question.summary and "work/old" in question.summary and "1 files" in question.summary
    assert _events(project, "wipe", "checks") == []  # nothing ran before the answer
    assert question.answer(False) is None
    started = step(project, question.answer(True))  # type: ignore[arg-type]
    assert isinstance(started, Started)
    assert len(_events(project, "wipe", "checks")) == 1
    assert _events(project, "wipe", "confirm")
    _finish(project, started)
    assert not (Path("work") / "old").exists()


def test_a_done_phase_asks_before_running_again_and_names_what_goes_stale(project: Project) -> None:
    _finish(project, step(project, StartRequest("make")))
    again = step(project, StartRequest("make"))
    assert isinstance(again, RerunNeeded) and again.dependents == ["use"]
    assert again.answer(False) is None
    _finish(project, step(project, again.answer(True)))  # type: ignore[arg-type]
    assert len(_events(project, "make", "run_started")) == 2


def test_a_live_phase_is_not_started_twice_and_a_bad_override_is_refused(project: Project) -> None:
    started = step(project, StartRequest("held"))
    assert isinstance(started, Started)
    try:
        live = step(project, StartRequest("held"))
        assert isinstance(live, AlreadyLive) and live.status.state == "running"
        refused = step(project, StartRequest("guarded", {"aproval": "typo"}))
        assert isinstance(refused, Refused) and "no check named 'aproval'" in refused.message
    finally:
        Path("work/go").touch()
    _finish(project, started)


class Scripted:
    """Answers as a front end would, remembering what it was asked."""

    def __init__(self, rerun: bool = False, confirm: bool = False,
                 override: Mapping[str, str] | None = None) -> None:
        self.answers = {"rerun": rerun, "confirm": confirm, "override": override}
        self.asked: list[str] = []

    def rerun(self, question: RerunNeeded) -> bool:
        self.asked.append("rerun")
        return bool(self.answers["rerun"])

    def confirm(self, question: ConfirmationNeeded) -> bool:
        self.asked.append("confirm")
        return bool(self.answers["confirm"])

    def override(self, question: BlockedStart) -> Mapping[str, str] | None:
        self.asked.append("override")
        return self.answers["override"]  # type: ignore[return-value]


def test_drive_asks_each_question_once_and_stops_at_a_refusal(project: Project) -> None:
    no = Scripted()
    assert isinstance(drive(project, StartRequest("guarded"), no), BlockedStart)
    assert no.asked == ["override"]

    yes = Scripted(override={"approval": "ok for the demo"})
    result = drive(project, StartRequest("guarded"), yes)
    assert isinstance(result, Started) and yes.asked == ["override"]
    _finish(project, result)

    rerun_declined = Scripted(rerun=False)
    assert isinstance(drive(project, StartRequest("guarded"), rerun_declined), RerunNeeded)
    assert len(_events(project, "guarded", "run_started")) == 1

    (Path("work") / "old").mkdir()
    confirmed = Scripted(confirm=True)
    result = drive(project, StartRequest("wipe"), confirmed)
    assert isinstance(result, Started) and confirmed.asked == ["confirm"]
    _finish(project, result)


def test_watching_sees_the_checks_of_a_run_found_running_and_then_its_end(project: Project) -> None:
    started = step(project, StartRequest("held"))
    assert isinstance(started, Started)
    watch = PhaseWatch(project)
    try:
        first = watch.look({})
        assert [r.name for r in first.attach_checks["held"]] == ["needs-done"]
        assert first.ended == []  # attaching is not an ending
    finally:
        Path("work/go").touch()
    wait_for(lambda: project.status("held").state == "done", 30, "held done")
    later = watch.look({})
    assert [(st.phase.id, st.state) for st in later.ended] == [("held", "done")]
    assert later.attach_checks == {}


def test_run_all_walks_in_order_and_halts_where_a_start_is_refused(project: Project) -> None:
    _finish(project, step(project, StartRequest("make")))
    steps = list(run_all(project, {}, Scripted(), io.StringIO(), timeout=30))
    kinds = [(type(s).__name__, getattr(getattr(s, "phase", None), "id", None)) for s in steps]
    assert isinstance(steps[0], Skipped) and steps[0].status.phase.id == "make"
    assert ("Entering", "use") in kinds and isinstance(steps[-1], Halted) and steps[-1].phase.id == "guarded"
    assert isinstance(steps[-2], BlockedStart)
    assert project.status("use").state == "done"

    Path("work/approval.txt").write_text("ok")
    (Path("work") / "old").mkdir()
    Path("work/go").touch()
    steps = list(run_all(project, {}, Scripted(confirm=True), io.StringIO(), timeout=30))
    assert [s.phase.id for s in steps if isinstance(s, Entering)] == ["guarded", "wipe", "held"]
    assert isinstance(steps[-1], AllDone)


def test_a_destructive_start_that_skipped_the_questions_still_asks_for_its_id(project: Project) -> None:
    """`attempt` alone (a console's start with answers already given) never launches an
    unconfirmed destructive phase: it comes back as the question."""
    (Path("work") / "old").mkdir()
    question = attempt(project, StartRequest("wipe"))
    assert isinstance(question, ConfirmationNeeded) and "deletes:" in question.summary
    assert project.run_dir("wipe") is None and (Path("work") / "old").exists()


def test_a_destructive_phase_whose_needs_are_not_done_says_blocked_before_asking_for_its_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`r` on clean before merge asked the operator to type `clean`, and only then said it
    was blocked."""
    (tmp_path / "work").mkdir()
    cfg = tmp_path / "order.yaml"
    cfg.write_text(textwrap.dedent("""\
        name: order
        vars: {work: ./work}
        state_dir: ${work}/state
        phases:
          - id: merge
            run: [python, -c, "print('merged')"]
          - id: clean
            confirm: true
            needs: [merge]
            run: [python, -c, "print('cleaned')"]
        """))
    monkeypatch.chdir(tmp_path)
    project = Project.load(cfg)
    first = step(project, StartRequest("clean"))
    assert isinstance(first, BlockedStart), first
    assert [r.name for r in first.failing] == ["needs-done"] and "merge is ready" in first.failing[0].message
    assert _events(project, "clean", "checks") == []  # a question, not a decision: nothing journaled
    confirm = step(project, first.answer({"needs-done": "merged by hand"}))  # type: ignore[arg-type]
    assert isinstance(confirm, ConfirmationNeeded)  # overridden: now the id is asked for
    started = step(project, confirm.answer(True))  # type: ignore[arg-type]
    _finish(project, started)
    assert len(_events(project, "clean", "checks")) == 1
