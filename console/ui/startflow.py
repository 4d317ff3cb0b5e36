"""The console's answers to the start flow (`console.core.startflow`): a dialog for each
question (run a done phase again, type a destructive phase's id, override failing checks)
and a toast for each outcome. The flow itself, what is asked and what an answer leads to,
is the core's; this module only shows it.

Each step reads files or runs checks, so it runs in a thread worker; its result comes back
to the UI loop as a `StartOutcome` message. A step that raises comes back the same way,
not as a failed worker: the flow must still learn that the start is over (the row stops
saying starting, a quit that waited for it goes ahead). Its notice reads as any failed
worker's (`console.ui.worker_notices`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.content import Content
from textual.message import Message

from console.core.flow import startflow
from console.core.flow.startflow import (
    AlreadyLive,
    BlockedStart,
    ConfirmationNeeded,
    Refused,
    RerunNeeded,
    Started,
    StartRequest,
    StartResult,
)
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.confirm_dialog import ConfirmDialog
from console.ui.worker_notices import NOTICE_TIMEOUT, failure_text

if TYPE_CHECKING:
    from console.ui.screens.main_screen import MainScreen


@dataclass
class StartOutcome(Message):
    """A step of the flow done in a worker. `launched`: the step ran the checks and the
    start (else it only asked the questions; None then means there are none left).
    `error`: what went wrong when the step raised instead."""

    request: StartRequest
    result: StartResult | None
    launched: bool
    error: str | None = None


class StartFlow:
    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen
        self.starting: set[str] = set()  # phases whose start (pre-flight, launch) is in flight

    def begin(self, phase_id: str) -> None:
        """The `r` key."""
        self.ask(StartRequest(phase_id))

    def ask(self, request: StartRequest) -> None:
        self.screen.run_worker(lambda: self._step(request, launch=False), thread=True, group="start",
                               exit_on_error=False, name=f"start {request.phase_id}")

    def start(self, request: StartRequest) -> None:
        """The checks and the launch, with the answers `request` carries."""
        self.screen.notify(f"starting {request.phase_id}: pre-flight checks…", timeout=3)
        self.starting.add(request.phase_id)
        self.screen.starting_changed()
        self.screen.run_worker(lambda: self._step(request, launch=True), thread=True, group="start",
                               exit_on_error=False, name=f"start {request.phase_id}")

    def _step(self, request: StartRequest, launch: bool) -> None:
        """(A blocked start sends its `blocked` notification in `Project.start` itself.)"""
        project = self.screen.project
        try:
            result = startflow.attempt(project, request) if launch else startflow.ask(project, request)
        except Exception as exc:  # noqa: BLE001 - shown on the UI loop, never a traceback
            self.screen.post_message(StartOutcome(request, None, launch, failure_text(f"start {request.phase_id}", exc)))
            return
        self.screen.post_message(StartOutcome(request, result, launch))

    def outcome(self, msg: StartOutcome) -> None:
        screen, res, pid = self.screen, msg.result, msg.request.phase_id
        if msg.launched:
            self.starting.discard(pid)
            screen.starting_changed()
        app = screen.app
        if getattr(app, "quit_when_started", False):
            # The operator quit while this start was in flight: it has now landed.
            if isinstance(res, Started):
                app.still_running = [*app.still_running, pid]
            app.quit_after_starts()
            return
        if msg.error is not None:
            screen.notify(msg.error, severity="error", timeout=NOTICE_TIMEOUT)
        elif res is None:
            self.start(msg.request)
        elif isinstance(res, AlreadyLive):
            screen.notify(f"{pid} is already {res.status.state}", severity="warning")
        elif isinstance(res, RerunNeeded):
            tail = f" Phases that need it ({', '.join(res.dependents)}) become stale." if res.dependents else ""
            app.push_screen(AskDialog(
                f"run {pid} again?", Content.assemble((pid, "bold"), f" is done.{tail} Run it again?"),
                yes="Run again"), lambda yes: self._then(res.answer(yes)))
        elif isinstance(res, ConfirmationNeeded):
            def confirmed(ok: bool | None) -> None:
                if not ok:
                    screen.notify(f"{pid} not started", timeout=3)
                self._then(res.answer(ok))

            app.push_screen(ConfirmDialog(pid, res.summary), confirmed)
        elif isinstance(res, BlockedStart):
            screen.remember_checks(pid, "check", res.results)
            app.push_screen(BlockedDialog(pid, res.results), lambda choice: self._then(res.answer(choice)))
        elif isinstance(res, Refused):
            screen.notify(res.message, severity="error", timeout=15)
        else:
            screen.notify(f"{pid} started", severity="information", timeout=4)
            if res.checks is not None:  # the pre-flight results the start passed on
                screen.remember_checks(pid, "check", res.checks)
            screen.started(pid)

    def _then(self, request: StartRequest | None) -> None:
        if request is not None:
            self.ask(request)
