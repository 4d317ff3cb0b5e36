"""One truth between the console and the command line: a value an operator saves with
`eagle3 set` in another shell while the console is open is what the console's next start
runs, and a phase done with the old value reads stale in the console as `eagle3 status`
says it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ui_harness import FROZEN, Notices, make_app, select, state_of, stop_all, wait_for

from console.core.lifecycle.project import Project
from console.ui.screens.main.reads import Intervals

CFG = textwrap.dedent("""\
    name: truth
    vars:
      work: ./work
      steps: "200"
    state_dir: ${work}/state
    phases:
      - id: train
        title: Train
        run: [python3, -c, "import sys; open('work/steps.txt', 'w').write(sys.argv[1])", "${steps}"]
        verify:
          - exists: ${work}/steps.txt
    """)

STATUS_ONLY = Intervals(status=0.1, gpu=3600, disk=3600, shm=3600, host=3600, log=3600, journal=3600,
                        preflight=0)


def _project(tmp_path: Path) -> Project:
    (tmp_path / "work").mkdir()
    cfg = tmp_path / "truth.yaml"
    cfg.write_text(CFG)
    return Project.load(cfg)


def _eagle3(*args: str) -> subprocess.CompletedProcess[str]:
    """The command line in its own process, as another shell would run it."""
    return subprocess.run([sys.executable, "-m", "console.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def _ran(tmp_path: Path) -> str | None:
    f = tmp_path / "work" / "steps.txt"
    return f.read_text() if f.exists() else None


async def test_a_value_set_in_another_shell_is_what_the_next_start_runs(tmp_path: Path) -> None:
    project = _project(tmp_path)
    app = make_app(project, intervals=FROZEN)  # no poll in between: the start itself must read it
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            main = app.main_screen()
            main.pollers["status"].poke()
            await select(pilot, app, "train")
            done = _eagle3("set", str(project.config.path), "steps=40")
            assert done.returncode == 0, done.stderr
            await pilot.press("r")
            await wait_for(pilot, lambda: _ran(tmp_path) is not None, timeout=60, what="train ran")
            assert _ran(tmp_path) == "40"  # not the 200 the console loaded with
    finally:
        stop_all(project)


async def test_a_phase_done_with_old_values_reads_stale_as_eagle3_status_says(tmp_path: Path) -> None:
    project = _project(tmp_path)
    cfg = str(project.config.path)
    notices = Notices()
    app = make_app(project, intervals=STATUS_ONLY)
    try:
        async with app.run_test(size=(100, 30), message_hook=notices.hook) as pilot:
            main = app.main_screen()
            await select(pilot, app, "train")
            await pilot.press("r")
            await wait_for(pilot, lambda: state_of(app, "train") == "done", timeout=60, what="train done")
            assert _ran(tmp_path) == "200"

            done = _eagle3("set", cfg, "steps=40")
            assert done.returncode == 0, done.stderr
            status = _eagle3("status", cfg, "--json")
            assert status.returncode == 1  # the command line calls it stale...
            assert {p["phase"]: p["state"] for p in json.loads(status.stdout)["phases"]} == {"train": "stale"}
            # ...and so does the console, without a restart
            await wait_for(pilot, lambda: state_of(app, "train") == "stale", timeout=30, what="train stale")
            assert "command changed" in (main.follow.by_id["train"].reason or "")
            title = str(main.query_one("#phases").border_title)
            assert "steps=40" in title  # the header shows the values now in effect

            await pilot.press("r")  # stale is not done: it starts at once, with the new value
            await wait_for(pilot, lambda: _ran(tmp_path) == "40", timeout=60, what="train ran with 40")
            await wait_for(pilot, lambda: state_of(app, "train") == "done", timeout=60, what="train done again")
    finally:
        stop_all(project)


async def test_a_config_broken_in_an_editor_keeps_the_console_and_refuses_the_start(tmp_path: Path) -> None:
    project = _project(tmp_path)
    notices = Notices()
    app = make_app(project, intervals=STATUS_ONLY)
    try:
        async with app.run_test(size=(100, 30), message_hook=notices.hook) as pilot:
            await select(pilot, app, "train")
            path = project.config.path
            path.write_text(CFG.replace("  - id: train", "  - idd: train"))
            await wait_for(pilot, lambda: any("does not load" in t for t in notices.texts), timeout=30,
                           what="a notice that the edited config does not load")
            assert any("truth.yaml" in t for t in notices.texts)
            await pilot.press("r")
            await wait_for(pilot, lambda: any("not started" in t and "truth.yaml" in t for t in notices.texts),
                           timeout=30, what="the start refused, naming the file")
            assert _ran(tmp_path) is None  # nothing ran on the values the file no longer says
            assert state_of(app, "train") == "ready"  # the console still shows what it knew
    finally:
        stop_all(project)
