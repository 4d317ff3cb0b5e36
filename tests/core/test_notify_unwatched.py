"""Notifications with no console open: the run's launcher sends `ended`/`failed` and
`stalled` itself, each once however many processes watch, and a notifier that hangs or
fails never changes the run."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

from core_harness import wait_for

from console.core.lifecycle.project import Project
from console.core.records.journal import Journal
from console.core.runs import procs
from console.core.runs.manager import run_status
from console.core.runs.rundir import RunDir

SEND = ("import os, sys; open(sys.argv[1], 'a').write(os.environ['EAGLE3_NOTIFY_EVENT'] + ' ' + sys.argv[2]"
        " + ' ' + os.environ['EAGLE3_SUMMARY'] + chr(10))")

CFG = textwrap.dedent("""\
    name: alone
    state_dir: ./state
    notify:
      - run: [{py}, -c, "{send}", sent.txt, "{{phase}}"]
        timeout: 10s
    phases:
      - id: boom
        run: [python, -c, "import sys; print('about to fail', flush=True); sys.exit(3)"]
      - id: quiet
        stall_after: 1s
        run: [python, -c, "import time\\nprint('working', flush=True)\\ntime.sleep(60)"]  # wait-ok: the phase program's own work, not a test pause
      - id: gated
        run: [python, -c, "print('never')"]
        checks:
          - exists: approval.txt
            name: approval
      - id: held
        run: [python, -c, "import os, time\\nwhile not os.path.exists('go'): time.sleep(0.02)"]  # wait-ok: the phase polls for the test's go file
    """)


def _project(tmp_path: Path, extra_notify: str = "") -> tuple[Path, Project]:
    cfg = tmp_path / "alone.yaml"
    text = CFG.format(py=sys.executable, send=SEND.replace('"', '\\"'))
    cfg.write_text(text.replace("phases:\n", extra_notify + "phases:\n", 1))
    return cfg, Project.load(cfg)


def _sent(tmp_path: Path) -> list[str]:
    path = tmp_path / "sent.txt"
    return path.read_text().splitlines() if path.exists() else []


def _records(project: Project, event: str, phase: str) -> list[dict]:
    return project.journal.read(phase=phase, events={event})


def _launcher_gone(rd: RunDir, timeout: float = 30.0) -> None:
    """Until the launcher has done all it does (exit, verify, journal, notify) and exited."""
    def gone() -> bool:
        pid = rd.read_pid()
        return rd.read_exit() is not None and pid is not None and not procs.alive(pid.pid, pid.start_time)
    wait_for(gone, timeout, f"the launcher of {rd.run_id} to exit")


def test_a_phase_that_fails_with_no_console_open_sends_failed_once_and_journals_it(tmp_path: Path) -> None:
    _, project = _project(tmp_path)
    rd = project.start("boom")
    _launcher_gone(rd)  # from here on nobody else could send it
    sent = _records(project, "notify_sent", "boom")
    assert [(r["on"], r["run_id"]) for r in sent] == [("failed", rd.run_id)]
    rec = wait_for(lambda: _records(project, "notify", "boom"), timeout=30, what="the notifier's record")
    assert len(rec) == 1 and rec[0]["on"] == "failed" and rec[0]["exit_code"] == 0
    assert _sent(tmp_path) == ["failed boom boom failed: exit code 3"]
    ended = _records(project, "run_ended", "boom")
    assert len(ended) == 1 and ended[0]["t"] <= rec[0]["t"]  # sent after the end is on record


def _stall_and_stop(tmp_path: Path, project: Project) -> RunDir:
    rd = project.start("quiet")
    try:
        wait_for(lambda: _records(project, "notify", "quiet"), timeout=30, what="the stalled notifier's record")
        wait_for(lambda: _sent(tmp_path), timeout=30, what="the stalled notification")
    finally:
        project.stop("quiet", grace=5)
    _launcher_gone(rd)
    return rd


def _assert_one_stall(tmp_path: Path, project: Project, rd: RunDir) -> None:
    """(The stop that ends the test sends `ended`: only the stall is counted here.)"""
    stalled = _records(project, "stalled", "quiet")
    assert [r["run_id"] for r in stalled] == [rd.run_id]
    assert _records(project, "stall_cleared", "quiet") == []
    assert [r["on"] for r in _records(project, "notify", "quiet") if r["on"] == "stalled"] == ["stalled"]
    sent = [line for line in _sent(tmp_path) if line.startswith("stalled")]
    assert len(sent) == 1 and sent[0].startswith("stalled quiet quiet stalled: no progress event and no log line")


def test_a_phase_that_goes_silent_with_no_console_open_sends_stalled_once(tmp_path: Path) -> None:
    _, project = _project(tmp_path)
    rd = _stall_and_stop(tmp_path, project)
    _assert_one_stall(tmp_path, project, rd)


def test_a_silence_is_sent_once_when_a_console_watches_it_too(tmp_path: Path) -> None:
    from console.core.lifecycle.notify import Notifier
    from console.core.lifecycle.snapshot import SnapshotBuilder
    from console.core.lifecycle.stall import StallWatch

    _, project = _project(tmp_path)
    console = Project.load(project.config.path)
    builder = SnapshotBuilder(console)
    watch = StallWatch(console.journal, Notifier(console.config, console.journal))
    done = threading.Event()
    errors: list[BaseException] = []

    def watch_like_a_console() -> None:
        try:
            while not done.wait(0.05):  # wait-ok: the console's poll period, shortened
                snap = builder.build()
                watch.update(snap.phases, now=snap.t)
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    thread = threading.Thread(target=watch_like_a_console, daemon=True)
    thread.start()
    try:
        rd = _stall_and_stop(tmp_path, project)
    finally:
        done.set()
        thread.join(10)
    assert errors == []
    _assert_one_stall(tmp_path, project, rd)


SLOW = ("import sys, time; open(sys.argv[1], 'w').write('started'); time.sleep(1.5);"  # wait-ok: a slow chat script
        " open(sys.argv[1], 'a').write(' sent')")


def test_stopping_a_phase_right_after_it_stalled_does_not_cut_off_the_notification(tmp_path: Path) -> None:
    slow = f"  - run: [{sys.executable}, -c, \"{SLOW}\", slow.txt]\n    on: [stalled]\n    timeout: 20s\n"
    _, project = _project(tmp_path, extra_notify=slow)
    note = tmp_path / "slow.txt"
    rd = project.start("quiet")
    try:
        wait_for(lambda: note.exists(), timeout=30, what="the slow notifier to start")
    finally:
        project.stop("quiet", grace=5)  # ends every descendant of the run's launcher
    _launcher_gone(rd)
    wait_for(lambda: note.read_text() == "started sent", timeout=30, what="the slow notifier to finish")


HANG = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)")  # wait-ok: a notifier that hangs


def test_a_notifier_that_hangs_or_fails_never_changes_the_run(tmp_path: Path) -> None:
    hang = f"  - run: [{sys.executable}, -c, \"{HANG}\", hanging.pid]\n    timeout: 20s\n"
    fail = f"  - run: [{sys.executable}, -c, \"import sys; sys.exit(7)\"]\n"
    _, project = _project(tmp_path, extra_notify=hang + fail)
    (tmp_path / "go").write_text("")
    rd = project.start("held")
    pid_file = tmp_path / "hanging.pid"
    try:
        _launcher_gone(rd)  # the launcher does not wait for its notifiers
        hung = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=30,
                            what="the hanging notifier to start"))
        done = wait_for(lambda: sorted(r["exit_code"] for r in _records(project, "notify", "held")
                                       if "exit_code" in r) == [0, 7], timeout=30,
                        what="the sending and the failing notifier, journaled")
        assert done and procs.gone(hung) is False  # still hanging, long after the run ended
        st = run_status(rd)
        assert (st.state, st.exit_code) == ("succeeded", 0)
        assert project.status("held").state == "done"
        ended = _records(project, "run_ended", "held")
        assert len(ended) == 1 and ended[0]["code"] == 0 and ended[0]["verify"] == "none"
        assert _sent(tmp_path) == ["ended held held done"]
    finally:
        if pid_file.exists() and pid_file.read_text():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_config_broken_while_the_phase_ran_costs_the_notification_not_the_run(tmp_path: Path) -> None:
    cfg, project = _project(tmp_path)
    rd = project.start("held")
    wait_for(lambda: run_status(rd).state == "running" and rd.read_pid() and rd.read_pid().child_pid,
             what="the phase to run")
    cfg.write_text("name: [broken\n")
    (tmp_path / "go").write_text("")
    _launcher_gone(rd)
    st = run_status(rd)
    assert (st.state, st.exit_code) == ("succeeded", 0)
    ended = Journal(tmp_path / "state").read(phase="held", events={"run_ended"})
    assert len(ended) == 1 and ended[0]["code"] == 0
    assert "notifications not sent" in rd.output_log.read_text()
    assert _sent(tmp_path) == []


def test_a_blocked_start_from_the_cli_sends_blocked_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from console.cli import main
    from console.core.lifecycle.notify import Notifier

    cfg, project = _project(tmp_path)
    fired: list[str] = []
    real = Notifier.fire

    def counting(self, event, *args, **kw):  # type: ignore[no-untyped-def]
        fired.append(event)
        return real(self, event, *args, **kw)

    monkeypatch.setattr(Notifier, "fire", counting)
    assert main(["run", str(cfg), "gated"]) != 0
    assert fired == ["blocked"]
    wait_for(lambda: _sent(tmp_path), timeout=30, what="the blocked notification")
    assert _sent(tmp_path) == ["blocked gated gated blocked: approval"]


def _fire_at_once(state: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    from console.core.config.loader import load_config
    from console.core.lifecycle.notify import Notifier

    config = load_config(state)
    notifier = Notifier(config, Journal(config.state_dir))
    barrier.wait()
    results.put(notifier.fire("failed", "boom", "failed", "r1", "exit code 3"))


def test_processes_that_see_the_same_end_at_once_send_it_once(tmp_path: Path) -> None:
    cfg, project = _project(tmp_path)
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(6), ctx.Queue()
    workers = [ctx.Process(target=_fire_at_once, args=(str(cfg), barrier, results)) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0] * 6
    assert sorted(results.get(timeout=10) for _ in workers) == [0] * 5 + [1]
    wait_for(lambda: _sent(tmp_path), timeout=30, what="the one notification")
    assert len(_records(project, "notify_sent", "boom")) == 1
