"""An open console and the runs' launchers share the sending: a run's end is sent once,
by its launcher; the console sends it only for a run whose launcher died (lost)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ui_harness import make_app, stop_all, wait_for

from console.core.lifecycle.project import Project
from console.core.runs import procs

CFG = """\
name: notified
state_dir: ./state
notify:
  - run: [%s, -c, "import os, sys; open(sys.argv[1], 'a').write(os.environ['EAGLE3_NOTIFY_EVENT'] + ' ' + os.environ['EAGLE3_SUMMARY'] + chr(10))", sent.txt]
    on: [ended, failed]
    timeout: 10s
phases:
  - id: doomed
    run: [python3, -c, "import time\\nprint('running', flush=True)\\ntime.sleep(60)"]  # wait-ok: the phase program's own work, not a test pause
  - id: boom
    run: [python3, -c, "import os, sys, time\\nwhile not os.path.exists('go'): time.sleep(0.02)\\nsys.exit(3)"]  # wait-ok: the phase polls for the test's go file
"""


def _sent(root: Path) -> list[str]:
    path = root / "sent.txt"
    return path.read_text().splitlines() if path.exists() else []


def _sent_records(project: Project, phase: str) -> list[dict]:
    return project.journal.read(phase=phase, events={"notify_sent"})


async def test_an_open_console_sends_the_end_of_a_run_whose_launcher_died_and_only_that(tmp_path: Path) -> None:
    cfg = tmp_path / "notified.yaml"
    cfg.write_text(CFG % sys.executable)
    project = Project.load(cfg)
    app = make_app(project)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            main = app.main_screen()
            boom = project.start("boom")
            await wait_for(pilot, lambda: main.follow.by_id.get("boom") is not None and main.follow.by_id["boom"].state == "running",
                           timeout=30, what="boom seen running")
            (tmp_path / "go").write_text("")
            await wait_for(pilot, lambda: ("boom", "failed") in main.follow.ended, timeout=30, what="boom seen ending")
            await wait_for(pilot, lambda: _sent_records(project, "boom"), timeout=30, what="boom's end sent")

            doomed = project.start("doomed")
            await wait_for(pilot, lambda: main.follow.by_id.get("doomed") is not None
                           and main.follow.by_id["doomed"].state == "running" and doomed.read_pid()
                           and doomed.read_pid().child_pid, timeout=30, what="doomed running")
            pid = doomed.read_pid()
            os.kill(pid.pid, signal.SIGKILL)  # the launcher first: nobody records the end
            procs.kill_group(pid.child_pid, 0)
            await wait_for(pilot, lambda: [ln for ln in _sent(tmp_path) if ln.startswith("failed doomed")],
                           timeout=30, what="the console's notification of the lost run")
            assert [r["run_id"] for r in _sent_records(project, "doomed")] == [doomed.run_id]
            assert [r["run_id"] for r in _sent_records(project, "boom")] == [boom.run_id]
            await wait_for(pilot, lambda: len(_sent(tmp_path)) == 2, timeout=30, what="both notifications")
            assert sorted(_sent(tmp_path)) == [
                "failed boom failed: exit code 3",
                "failed doomed failed: the run vanished without recording an exit (killed with -9 or the "
                "machine restarted)"]
    finally:
        stop_all(project)
