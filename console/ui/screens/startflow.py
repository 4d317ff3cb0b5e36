"""The console's answers to the start flow (`console.core.flow.startflow`): a dialog for each
question (run a done phase again, type a destructive phase's id, override failing checks)
and a toast for each outcome. The flow itself, what is asked and what an answer leads to,
is the core's; this module only shows it.

Each step reads files or runs checks, so it runs in a thread worker; its result comes back
to the UI loop as a `StartOutcome` message. A step that raises comes back the same way,
not as a failed worker: the flow must still learn that the start is over (the row stops
saying starting, a quit that waited for it goes ahead). Its notice reads as any failed
worker's (`console.ui.worker_notices`).

The flow knows its owner only as a Textual widget: it runs its workers there and posts
there what the owner may want to draw (`StartsChanged`, `StartChecked`, `StartLaunched`).
`StartsLanded` is not the screen's business: it bubbles on to the app, which quits."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

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
from console.core.lifecycle.project import Project
from console.ui.messages import StartChecked, StartLaunched, StartOutcome, StartsChanged, StartsLanded
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.confirm_dialog import ConfirmDialog
from console.ui.worker_notices import NOTICE_TIMEOUT, failure_text


class StartFlow:
    def __init__(self, owner: Widget, project: Project) -> None:
        self.owner = owner
        self.project = project
        self.starting: set[str] = set()  # phases whose start (pre-flight, launch) is in flight
        self.quitting = False  # the console quits once no start is in flight: ask nothing more
        self._landed: list[str] = []  # launched since the operator quit

    def begin(self, phase_id: str) -> None:
        """The `r` key."""
        self.ask(StartRequest(phase_id))

    def ask(self, request: StartRequest) -> None:
        self.owner.run_worker(lambda: self._step(request, launch=False), thread=True, group="start",
                              exit_on_error=False, name=f"start {request.phase_id}")

    def start(self, request: StartRequest) -> None:
        """The checks and the launch, with the answers `request` carries."""
        self.owner.notify(f"starting {request.phase_id}: pre-flight checks…", timeout=3)
        self.starting.add(request.phase_id)
        self.owner.post_message(StartsChanged())
        self.owner.run_worker(lambda: self._step(request, launch=True), thread=True, group="start",
                              exit_on_error=False, name=f"start {request.phase_id}")

    def quit_when_landed(self) -> None:
        """The operator quit with a start in flight: it lands, then `StartsLanded` goes up."""
        self.quitting = True

    def _step(self, request: StartRequest, launch: bool) -> None:
        """(A blocked start sends its `blocked` notification in `Project.start` itself.)"""
        try:
            result = startflow.attempt(self.project, request) if launch else startflow.ask(self.project, request)
        except Exception as exc:  # noqa: BLE001 - shown on the UI loop, never a traceback
            self.owner.post_message(StartOutcome(request, None, launch, failure_text(f"start {request.phase_id}", exc)))
            return
        self.owner.post_message(StartOutcome(request, result, launch))

    def outcome(self, msg: StartOutcome) -> None:
        res, pid = msg.result, msg.request.phase_id
        if msg.launched:
            self.starting.discard(pid)
            self.owner.post_message(StartsChanged())
        if self.quitting:
            # The operator quit while this start was in flight: it has now landed.
            if isinstance(res, Started):
                self._landed.append(pid)
            if not self.starting:
                self.owner.post_message(StartsLanded(tuple(self._landed)))
            return
        if msg.error is not None:
            self.owner.notify(msg.error, severity="error", timeout=NOTICE_TIMEOUT)
        elif res is None:
            self.start(msg.request)
        else:
            self._answer(pid, res)

    def _answer(self, pid: str, res: StartResult) -> None:
        """What the operator sees of a step's result: a question, or how the start went."""
        owner, app = self.owner, self.owner.app
        if isinstance(res, AlreadyLive):
            owner.notify(f"{pid} is already {res.status.state}", severity="warning")
        elif isinstance(res, RerunNeeded):
            tail = f" Phases that need it ({', '.join(res.dependents)}) become stale." if res.dependents else ""
            app.push_screen(AskDialog(
                f"run {pid} again?", Content.assemble((pid, "bold"), f" is done.{tail} Run it again?"),
                yes="Run again"), lambda yes: self._then(res.answer(yes)))
        elif isinstance(res, ConfirmationNeeded):
            def confirmed(ok: bool | None) -> None:
                if not ok:
                    owner.notify(f"{pid} not started", timeout=3)
                self._then(res.answer(ok))

            app.push_screen(ConfirmDialog(pid, res.summary), confirmed)
        elif isinstance(res, BlockedStart):
            owner.post_message(StartChecked(pid, res.results))
            app.push_screen(BlockedDialog(pid, res.results), lambda choice: self._then(res.answer(choice)))
        elif isinstance(res, Refused):
            owner.notify(res.message, severity="error", timeout=15)
        else:
            owner.notify(f"{pid} started", severity="information", timeout=4)
            if res.checks is not None:  # the pre-flight results the start passed on
                owner.post_message(StartChecked(pid, res.checks))
            owner.post_message(StartLaunched(pid))

    def _then(self, request: StartRequest | None) -> None:
        if request is not None:
            self.ask(request)
