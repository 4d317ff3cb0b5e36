"""Starting a phase from the console: checks, then (when needed) the blocked dialog with
its overrides, the typed confirmation of a destructive phase, and the run itself.

`Project.start` decides; this module only turns each of its answers (`Blocked`,
`NeedsConfirmation`, an error, a run dir) into the next dialog or a message, and loops
back into `Project.start` with what the operator chose. The start runs in a thread worker;
its outcome comes back to the UI loop as a `StartOutcome` message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.content import Content
from textual.message import Message

from console.core.errors import Eagle3Error
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.confirm_dialog import ConfirmDialog

LIVE = ("running", "verifying")


@dataclass
class StartOutcome(Message):
    """What `Project.start` did: a run dir, or the exception that says what it needs."""

    phase_id: str
    result: Any
    overrides: dict[str, str]
    confirmed: bool


class StartFlow:
    def __init__(self, screen: Any) -> None:
        self.screen = screen
        self.starting: set[str] = set()  # phases whose start (pre-flight, launch) is in flight

    @property
    def project(self) -> Any:
        return self.screen.project

    def begin(self, phase_id: str) -> None:
        """The `r` key: refuse a live phase, ask before re-running a done one, else start."""
        st = self.screen.by_id.get(phase_id)
        if st is not None and st.state in LIVE:
            self.screen.notify(f"{phase_id} is already {st.state}", severity="warning")
            return
        if st is not None and st.state == "done":
            after = [s.phase.id for s in self.screen.statuses if phase_id in s.phase.needs]

            def again(yes: bool | None) -> None:
                if yes:
                    self.start(phase_id, {}, False)

            tail = f" Phases that need it ({', '.join(after)}) become stale." if after else ""
            self.screen.app.push_screen(AskDialog(
                f"run {phase_id} again?",
                Content.assemble((phase_id, "bold"), f" is done.{tail} Run it again?"),
                yes="Run again"), again)
            return
        if st is not None and st.phase.confirm:
            # Ask before the start, so its checks run (and are journaled) once, not twice.
            self.screen.run_worker(lambda: self._summary(phase_id), thread=True, group="start",
                                   exit_on_error=False, name=f"summary:{phase_id}")
            return
        self.start(phase_id, {}, False)

    def _summary(self, phase_id: str) -> None:
        from console.core.project import NeedsConfirmation

        try:
            result: Any = NeedsConfirmation(self.project.config.phase(phase_id),
                                            self.project.confirmation_summary(phase_id))
        except Exception as exc:  # noqa: BLE001 - shown on the UI loop
            result = exc
        self.screen.post_message(StartOutcome(phase_id, result, {}, False))

    def start(self, phase_id: str, overrides: dict[str, str], confirmed: bool) -> None:
        self.screen.notify(f"starting {phase_id}: pre-flight checks…", timeout=3)
        self.starting.add(phase_id)
        self.screen.starting_changed()
        self.screen.run_worker(lambda: self._start(phase_id, overrides, confirmed), thread=True,
                               group="start", exit_on_error=False, name=f"start:{phase_id}")

    def _start(self, phase_id: str, overrides: dict[str, str], confirmed: bool) -> None:
        """(A blocked start sends its `blocked` notification in `Project.start` itself.)"""
        try:
            result: Any = self.project.start(phase_id, overrides=overrides or None, confirmed=confirmed)
        except Exception as exc:  # noqa: BLE001 - every outcome is handled on the UI loop
            result = exc
        self.screen.post_message(StartOutcome(phase_id, result, overrides, confirmed))

    def outcome(self, msg: StartOutcome) -> None:
        from console.core.project import Blocked, NeedsConfirmation

        screen, res = self.screen, msg.result
        self.starting.discard(msg.phase_id)
        screen.starting_changed()
        if getattr(screen.app, "quit_when_started", False):
            # The operator quit while this start was in flight: it has now landed.
            if not isinstance(res, Exception):
                screen.app.still_running = [*screen.app.still_running, msg.phase_id]
            screen.app.quit_after_starts()
            return
        if isinstance(res, Blocked):
            screen.remember_checks(msg.phase_id, "check", res.results)

            def overridden(choice: dict[str, str] | None) -> None:
                if choice:
                    self.start(msg.phase_id, {**msg.overrides, **choice}, msg.confirmed)

            screen.app.push_screen(BlockedDialog(msg.phase_id, res.results), overridden)
        elif isinstance(res, NeedsConfirmation):
            def confirmed(ok: bool | None) -> None:
                if ok:
                    self.start(msg.phase_id, msg.overrides, True)
                else:
                    screen.notify(f"{msg.phase_id} not started", timeout=3)

            screen.app.push_screen(ConfirmDialog(msg.phase_id, res.summary), confirmed)
        elif isinstance(res, Eagle3Error):
            screen.notify(str(res), severity="error", timeout=15)
        elif isinstance(res, Exception):
            screen.notify(f"could not start {msg.phase_id}: {type(res).__name__}: {res}", severity="error",
                          timeout=15)
        else:
            screen.notify(f"{msg.phase_id} started", severity="information", timeout=4)
            seen = self.project.last_checks.get(msg.phase_id)
            if seen is not None:  # the pre-flight results the start passed on
                screen.remember_checks(msg.phase_id, "check", seen)
            screen.started(msg.phase_id)
