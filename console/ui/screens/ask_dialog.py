"""A yes/no question (stop a phase, quit the console) answered with y or n."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class AskDialog(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="ask.yes", tooltip="Yes"),
        Binding("n,escape", "answer(False)", "No", id="ask.no", tooltip="No, go back"),
    ]

    def __init__(self, title: str, text: Content | str, yes: str = "Yes", danger: bool = False) -> None:
        super().__init__(classes="dialog")
        self.title_text = title
        self.text = text
        self.yes = yes
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-box") as box:
            box.border_title = self.title_text
            yield Static(self.text, id="ask-text", classes="dialog-text")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes} (y)", variant="error" if self.danger else "primary", id="ask-yes")
                yield Button("No (n)", id="ask-no")

    def on_mount(self) -> None:
        self.query_one("#ask-no").focus()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "ask-yes")
