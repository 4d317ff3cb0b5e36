"""Helpers for the console's UI tests: a tiny real project config, telemetry fakes pinned
to fixed times, and a bounded wait for conditions the UI reaches asynchronously."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from textual.message import Message
from textual.notifications import Notify

from console.core.lifecycle.project import Project
from console.core.runs import procs
from console.core.runs.rundir import RunDir
from console.core.telemetry.fake import FakeDiskSource, FakeGpuSource, FakeHostSource, FakeShmSource
from console.ui.app import ConsoleApp
from console.ui.screens.main.reads import Intervals

T0 = 1_750_000_000.0

CONFIG = """\
name: uitest
vars:
  workdir: ./work
state_dir: ${workdir}/state
volumes: ["${workdir}"]
phases:
  - id: prep
    title: Prepare inputs
    run: [python3, -c, "import sys, time\\nfor i in range(40): print('prep line', i, flush=True)\\nsys.stdout.write('progress 50%\\\\rprogress 100%\\\\n')"]
    verify:
      - exists: ${workdir}
  - id: train
    title: Train the drafter
    needs: [prep]
    run: [python3, -c, "print('training')"]
  - id: gated
    title: Gated by a missing file
    run: [python3, -c, "print('gated ran')"]
    checks:
      - exists: /nonexistent-eagle3-ui/missing-input
        name: input-present
  - id: clean
    title: Clean old outputs
    confirm: true
    run: [python3, -c, "print('cleaning')"]
    outputs: ["${workdir}/old"]
  - id: sleeper
    title: Sleep a long time
    run: [python3, -c, "import time\\nprint('sleeping', flush=True)\\ntime.sleep(60)"]  # wait-ok: the phase program's own work, not a test pause
  - id: stream
    title: Stream progress and log lines
    run: [python3, stream.py]
    stall_after: 1h
"""

# A phase that reports 30 log lines and 30 progress events with fixed times (so its rate,
# ETA and loss are the same on every run), then waits for `stream.stop` (at most 120 s).
STREAM = """\
import json, os, sys, time
T0 = %r
ev = open(os.environ["EAGLE3_EVENTS"], "a")
for i in range(1, 31):
    print(f"stream line {i:02d} wrote rows_0/{i * 100}.safetensors", flush=True)
    ev.write(json.dumps({"t": T0 + i, "kind": "progress", "done": i * 100, "total": 10000, "unit": "samples",
                         "bytes_written": i * 100 * 2_000_000}) + "\\n")
    ev.write(json.dumps({"t": T0 + i, "kind": "metric", "name": "loss", "value": 3.0 - i * 0.05}) + "\\n")
    ev.flush()
print("stream: waiting for stream.stop", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists("stream.stop") and time.monotonic() < deadline:
    time.sleep(0.05)  # wait-ok: the phase polls for its stop file
print("stream: finished", flush=True)
"""


class AtTime:
    """A fake source read at a fixed time, so snapshots are byte-stable."""

    def __init__(self, source, t: float = T0) -> None:  # type: ignore[no-untyped-def]
        self.source = source
        self.t = t

    def read(self):  # type: ignore[no-untyped-def]
        return self.source.read(t=self.t)


def write_config(root: Path, text: str = CONFIG) -> Path:
    (root / "work").mkdir(parents=True, exist_ok=True)
    (root / "stream.py").write_text(STREAM % T0)
    path = root / "cfg.yaml"
    path.write_text(text)
    return path


def fixed_sources(gpu=None):  # type: ignore[no-untyped-def]
    return dict(
        gpu_source=AtTime(gpu or FakeGpuSource(n=8, failing=(3,))),
        disk_source=AtTime(FakeDiskSource(volumes=("/data", "/scratch"))),
        shm_source=AtTime(FakeShmSource()),
        host_source=AtTime(FakeHostSource()),
    )


FAST = Intervals(status=0.1, gpu=0.2, disk=0.2, shm=0.2, host=0.2, log=0.05, journal=0.2, preflight=0)
FROZEN = Intervals(status=3600, gpu=3600, disk=3600, shm=3600, host=3600, log=3600, journal=3600,
                   preflight=0)


def make_app(project: Project, intervals: Intervals = FAST, clock: Callable[[], float] = time.time,
             gpu=None, **kw) -> ConsoleApp:  # type: ignore[no-untyped-def]
    return ConsoleApp(project, intervals=intervals, clock=clock, **fixed_sources(gpu), **kw)


def showing(app, kind: type) -> bool:  # type: ignore[no-untyped-def]
    """The screen on top is a `kind` and mounted: composed, so its widgets can be queried and
    keys reach them (a pushed screen is `app.screen` a moment before its compose has run)."""
    screen = app.screen
    return isinstance(screen, kind) and screen.is_mounted


async def wait_for(pilot, cond: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    """Polls `cond` while the app runs. It returns as it did when each poll was a `pilot.pause`:
    on a first look that holds, or after a pause that drained the screen's queues and painted.
    A pause a poll (one call per widget of the screen, 20 times a second) was most of a waiting
    test's CPU; a sleep lets the app work meanwhile, and a pause comes once `cond` looks true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await asyncio.sleep(0.05)  # wait-ok: poll interval of a deadline loop
        if cond():
            await pilot.pause(0)  # wait-ok: no wait, a settle once cond looks true, then look again
    raise AssertionError(f"timed out after {timeout}s waiting for {what or cond}")


class Notices:
    """The notifications the app was asked to show, as posted (a toast can expire while a
    loaded machine catches up): pass `hook` as `run_test(message_hook=...)`."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []  # (severity, message)

    def hook(self, message: Message) -> None:
        if isinstance(message, Notify):
            self.posted.append((message.notification.severity, message.notification.message))

    @property
    def texts(self) -> list[str]:
        return [text for _, text in self.posted]


def state_of(app: ConsoleApp, phase_id: str) -> str | None:
    st = app.main_screen().follow.by_id.get(phase_id)
    return st.state if st is not None else None


async def select(pilot, app: ConsoleApp, phase_id: str) -> None:  # type: ignore[no-untyped-def]
    main = app.main_screen()
    await wait_for(pilot, lambda: phase_id in main.follow.by_id, what=f"{phase_id} listed")
    main.query_one("#phases").select_id(phase_id)
    await wait_for(pilot, lambda: main.selected == phase_id, what=f"{phase_id} selected")


def finish(project: Project, *phases: str) -> None:
    """Run each phase to its end, in turn, as a finished pipeline would have (a phase's
    needs must be done first)."""
    for pid in phases:
        run = project.start(pid)
        deadline = time.monotonic() + 60
        while (state := next(s.state for s in project.statuses() if s.phase.id == pid)) != "done" or not gone(run):
            assert state in ("ready", "running", "verifying", "done") and time.monotonic() < deadline, f"{pid}: {state}"
            time.sleep(0.1)  # wait-ok: poll interval of a deadline loop


def gone(run: RunDir) -> bool:
    """The run's launcher has exited: nothing of the run is left to change its state."""
    info = run.read_pid()
    return info is not None and procs.gone(info.pid)


def stop_all(project: Project) -> None:
    for ph in project.config.phases:
        try:
            project.stop(ph.id, grace=2)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


def workers_of(app: ConsoleApp, group: str) -> set[object]:
    """The main screen's workers of `group` ("start", "stop") that have not finished."""
    return {w for w in app.main_screen().workers if w.group == group and not w.is_finished}


async def answered(pilot, app: ConsoleApp, dialog: type) -> None:  # type: ignore[no-untyped-def]
    """Wait until `dialog` has closed and its answer has been handled: the answer's callback
    is queued before the dialog is popped, and `pilot.pause()` drains every queue it is in."""
    await wait_for(pilot, lambda: not isinstance(app.screen, dialog), what=f"the {dialog.__name__} to close")
    await pilot.pause()


async def nothing_started(pilot, app: ConsoleApp, phase_id: str, before: set[object]) -> None:  # type: ignore[no-untyped-def]
    """Asserts that an answer already handled started nothing: no start step it began is still
    at work, and none that already finished asked for a launch (its outcome was posted before
    it finished, so the drain below delivers it: a launch would show in `flow.starting`)."""
    assert not workers_of(app, "start") - before, f"an answer that should start nothing began a start of {phase_id}"
    await pilot.pause()
    assert phase_id not in app.main_screen().flow.starting, f"{phase_id} is starting"
