"""Run on a blocked phase: the failing checks, and a way to override some of them with a
reason that goes into the journal."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, SelectionList, Static
from textual.widgets.selection_list import Selection

from console.core.checks.result import CheckResult
from console.ui.components.checks_view import render_results


class BlockedDialog(ModalScreen[dict[str, str] | None]):
    """Dismisses with {check name: reason} to override, or None to cancel."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="blocked.cancel", tooltip="Close without running"),
        Binding("ctrl+o", "override", "Override and run", id="blocked.override",
                tooltip="Run with the selected checks overridden; the reason is journaled"),
    ]

    def __init__(self, phase_id: str, results: list[CheckResult]) -> None:
        super().__init__(classes="dialog")
        self.phase_id = phase_id
        self.results = results
        self.failing = [r for r in results if r.blocking]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-box") as box:
            box.border_title = f"{self.phase_id} is blocked"
            yield Static(Content.assemble(
                (f"{len(self.failing)} check(s) fail. ", "bold $error"),
                "Fix them and press c to check again, or pick the checks to override and say why.",
            ), classes="dialog-text")
            yield Static(render_results(self.failing, evidence_lines=2), id="blocked-evidence",
                         classes="dialog-text")
            yield SelectionList[str](
                *[Selection(f"{r.name}: {r.message.splitlines()[0] if r.message else ''}", r.name,
                            len(self.failing) == 1) for r in self.failing],
                id="blocked-checks",
            )
            yield Input(placeholder="reason (recorded in the journal)", id="blocked-reason")
            yield Label("", id="blocked-error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Override and run", variant="warning", id="blocked-run")
                yield Button("Cancel", id="blocked-cancel")

    def on_mount(self) -> None:
        self.query_one("#blocked-checks").focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_override(self) -> None:
        picked = list(self.query_one("#blocked-checks", SelectionList).selected)
        reason = self.query_one("#blocked-reason", Input).value.strip()
        err = self.query_one("#blocked-error", Label)
        if not picked:
            err.update("pick at least one check to override (space toggles)")
            return
        if not reason:
            err.update("type a reason: it is recorded in the journal with your name")
            self.query_one("#blocked-reason").focus()
            return
        self.dismiss({name: reason for name in picked})

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_override()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "blocked-run":
            self.action_override()
        else:
            self.dismiss(None)

    def picked(self) -> list[Any]:
        return list(self.query_one("#blocked-checks", SelectionList).selected)
