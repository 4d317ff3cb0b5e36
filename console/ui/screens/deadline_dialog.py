"""The project's deadline, typed (`d`): a duration from now or a time of day, the same words as
`eagle3 run --until`. It says which deadline holds now; empty or `off` clears it. The dialog
only reads what was typed: the main screen sets it (through the core) and the runs' launchers
keep it, so it holds with the console gone."""

from __future__ import annotations

import time
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from console.core.runs.deadline import Deadline, DeadlineError, parse_until
from console.core.text.durations import format_duration

CLEAR = ("", "off", "none")


@dataclass(frozen=True)
class DeadlineTyped:
    at: float | None  # None: clear the deadline
    typed: str


class DeadlineDialog(ModalScreen["DeadlineTyped | None"]):
    """Dismissed with what was typed (a time, or a clear), or None to change nothing."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="deadline.cancel", tooltip="Close; the deadline stays as it is"),
    ]

    def __init__(self, current: Deadline | None, now: float) -> None:
        super().__init__(classes="dialog")
        self.current = current
        self.now = now

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-box") as box:
            box.border_title = "deadline"
            yield Static(self._holds(), id="deadline-now", classes="dialog-text")
            yield Static(Content.assemble(
                "At the deadline every running phase gets the stop ", ("s", "bold"), " sends and keeps its "
                "checkpoint. Type a duration (", ("8m30s", "bold"), ", ", ("2h", "bold"), ") or a time of day (",
                ("14:05", "bold"), "); empty or ", ("off", "bold"), " clears it."), classes="dialog-text")
            yield Input(placeholder="8m30s or 14:05", id="deadline-input")
            yield Label("", id="deadline-error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Set", variant="primary", id="deadline-set")
                yield Button("Cancel", id="deadline-cancel")

    def _holds(self) -> Content:
        due = self.current
        if due is None or due.passed(self.now):
            return Content.styled("No deadline is set.", "$text-muted")
        return Content.assemble("Now: ", (due.clock(), "bold"), f", in {format_duration(due.left(self.now))} "
                                f"(set by {due.by}: {due.how}).")

    def on_mount(self) -> None:
        self.query_one("#deadline-input").focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _submit(self) -> None:
        typed = self.query_one("#deadline-input", Input).value.strip()
        if typed.lower() in CLEAR:
            self.dismiss(DeadlineTyped(None, typed))
            return
        try:
            self.dismiss(DeadlineTyped(parse_until(typed, time.time()), typed))
        except DeadlineError as e:
            self.query_one("#deadline-error", Label).update(str(e).removeprefix("--until "))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "deadline-set":
            self._submit()
        else:
            self.dismiss(None)
