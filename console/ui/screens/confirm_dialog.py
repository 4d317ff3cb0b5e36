"""A destructive phase (`confirm: true`): say what it will do, and run it only when the
operator types the phase id."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from console.ui.screens.blocked_dialog import fit_scroll


class ConfirmDialog(ModalScreen[bool]):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="confirm.cancel", tooltip="Close without running"),
    ]

    def __init__(self, phase_id: str, summary: str) -> None:
        super().__init__(classes="dialog")
        self.phase_id = phase_id
        self.summary = summary

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-box") as box:
            box.border_title = f"{self.phase_id} is destructive"
            with VerticalScroll(id="dialog-scroll", classes="dialog-scroll"):
                yield Static(Content.styled("This phase will:", "bold $warning"), classes="dialog-text")
                yield Static(Content(self.summary), id="confirm-summary", classes="dialog-text")
            yield Static(Content.assemble("Type ", (self.phase_id, "bold"), " to run it."),
                         classes="dialog-text")
            yield Input(placeholder=self.phase_id, id="confirm-input")
            yield Label("", id="confirm-error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Run", variant="error", id="confirm-run")
                yield Button("Cancel", id="confirm-cancel")

    def on_mount(self) -> None:
        fit_scroll(self, "#dialog-scroll")
        self.query_one("#confirm-input").focus()

    def on_resize(self) -> None:
        fit_scroll(self, "#dialog-scroll")

    def action_cancel(self) -> None:
        self.dismiss(False)

    def _submit(self) -> None:
        typed = self.query_one("#confirm-input", Input).value.strip()
        if typed == self.phase_id:
            self.dismiss(True)
        else:
            self.query_one("#confirm-error", Label).update(f"type exactly '{self.phase_id}' to run, or esc")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm-run":
            self._submit()
        else:
            self.dismiss(False)
