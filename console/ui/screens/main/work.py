"""The thread workers the main screen's keys start: checks, verify, the background
pre-flight, a stop and the deadline. Their bodies do not catch: a failure reaches the
operator as one notice named for the worker (`console.ui.worker_notices`), and the
background pre-flight's group is quiet, since the operator's own check shows its error."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.screen import Screen

from console.core.lifecycle.project import Project
from console.ui.messages import ActionFailed, ChecksDone
from console.ui.screens.deadline_dialog import DeadlineTyped

PREFLIGHT_GROUP = "preflight"


class MainWork:
    """Starts each worker on `screen` (whose `WorkerNotices` shows a failure) and posts
    what it found back to it; `poke_status` asks the status poller for a look now."""

    def __init__(self, screen: Screen[None], project: Project, poke_status: Callable[[], None]) -> None:
        self.screen = screen
        self.project = project
        self.poke_status = poke_status

    def _start(self, body: Callable[[], None], name: str, group: str) -> None:
        self.screen.run_worker(body, name=name, group=group, thread=True, exit_on_error=False)

    def checks(self, phase_id: str, kind: str) -> None:
        """`kind`: check or verify, an operator's (journaled: those are decisions)."""
        self._start(partial(self._checks, phase_id, kind), f"{kind} {phase_id}", "checks")

    def preflight(self, phase_id: str) -> None:
        """Not journaled, and fails silently: an operator's own check (c) shows the error."""
        self._start(partial(self._checks, phase_id, "preflight"), f"pre-flight {phase_id}", PREFLIGHT_GROUP)

    def stop(self, phase_id: str, run_id: str) -> None:
        self._start(partial(self._stop, phase_id, run_id), f"stop {phase_id}", "stop")

    def deadline(self, answer: DeadlineTyped) -> None:
        self._start(partial(self._set_deadline, answer), "deadline", "deadline")

    def _checks(self, phase_id: str, kind: str) -> None:
        if kind == "verify":
            results = self.project.verify(phase_id)
        else:
            results = self.project.check(phase_id, journal=kind == "check")
        self.screen.post_message(ChecksDone(phase_id, results, kind))

    def _stop(self, phase_id: str, run_id: str) -> None:
        """Stops the run the operator was asked about, and only that one: a phase restarted
        while the question was open is left alone, an outcome the operator reads, not a failure."""
        current = self.project.run_dir(phase_id)
        if current is None or current.run_id != run_id:
            now = current.run_id if current is not None else "none"
            self.screen.post_message(ActionFailed(
                f"{phase_id} was restarted while you were asked (run {run_id} -> {now}); nothing was "
                f"stopped. Press s again to stop the new run."))
            return
        if not self.project.stop(phase_id, run_id=run_id):
            self.screen.post_message(ActionFailed(f"{phase_id} was not running"))
        self._poke_from_thread()

    def _set_deadline(self, answer: DeadlineTyped) -> None:
        """The project's deadline, which the runs' launchers keep."""
        if answer.at is None:
            said = "deadline cleared" if self.project.clear_deadline() else "no deadline was set"
        else:
            due = self.project.set_deadline(answer.at, f"console: {answer.typed}")
            said = f"deadline {due.clock()}: running phases then get the stop s sends and keep their checkpoints"
        self.screen.app.call_from_thread(self.screen.notify, said, title="deadline", timeout=8)
        self._poke_from_thread()

    def _poke_from_thread(self) -> None:
        try:
            self.screen.app.call_from_thread(self.poke_status)
        except RuntimeError:
            pass  # the app is closing
