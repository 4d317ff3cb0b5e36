"""Run on a blocked phase: the failing checks, and a way to override some of them with a
reason that goes into the journal.

The checks and their evidence scroll; the reason field and the buttons sit below the
scrolling part, so three failing checks on an 80x24 screen never push them out of reach.
`needs-done` is not offered while an upstream phase is still running: overriding it would
start this phase on half-written inputs."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, SelectionList, Static
from textual.widgets.selection_list import Selection

from console.core.checks.result import CheckResult
from console.core.lifecycle.state import LIVE
from console.ui.components.checks.checks_view import render_results

NEEDS_CHECK = "needs-done"
FIXED_ROWS = 12  # border, reason field, error line, buttons, margins: what never scrolls


def upstream_running(r: CheckResult) -> list[str]:
    """The upstream phases still running, for a failing needs-done check."""
    if r.name != NEEDS_CHECK:
        return []
    missing = r.evidence.get("missing") if isinstance(r.evidence, dict) else None
    if not isinstance(missing, dict):
        return []
    return [p for p, state in missing.items() if state in LIVE]


def fit_scroll(screen: ModalScreen[Any], scroll_id: str) -> None:
    """Let the scrolling part take what the fixed part leaves of 90 % of the screen."""
    room = int(screen.size.height * 0.9) - FIXED_ROWS
    screen.query_one(scroll_id).styles.max_height = max(3, room)


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
        self.locked = {r.name: upstream_running(r) for r in self.failing if upstream_running(r)}
        self.offered = [r for r in self.failing if r.name not in self.locked]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-box") as box:
            box.border_title = f"{self.phase_id} is blocked"
            with VerticalScroll(id="dialog-scroll", classes="dialog-scroll"):
                yield Static(Content.assemble(
                    (f"{len(self.failing)} check(s) fail. ", "bold $error"),
                    "Fix them and press c to check again, or pick the checks to override and say why.",
                ), classes="dialog-text")
                yield Static(render_results(self.failing, evidence_lines=2), id="blocked-evidence",
                             classes="dialog-text")
                for name, running in self.locked.items():
                    yield Static(Content.assemble(
                        (f"{name} cannot be overridden: ", "bold $warning"),
                        f"{', '.join(running)} is still running. Wait for it to finish."),
                        classes="dialog-text blocked-locked")
                yield SelectionList[str](
                    *[Selection(f"{r.name}: {r.message.splitlines()[0] if r.message else ''}", r.name,
                                len(self.offered) == 1) for r in self.offered],
                    id="blocked-checks",
                )
            yield Input(placeholder="reason (recorded in the journal)", id="blocked-reason")
            yield Label("", id="blocked-error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Override and run", variant="warning", id="blocked-run",
                             disabled=not self.offered)
                yield Button("Cancel", id="blocked-cancel")

    def on_mount(self) -> None:
        fit_scroll(self, "#dialog-scroll")
        # Focus without scrolling to the list: the dialog opens at its header, which says
        # how many checks fail and what to do, not at the end of the evidence.
        if self.offered:
            self.query_one("#blocked-checks").focus(scroll_visible=False)
        else:
            self.query_one("#blocked-checks").display = False
            self.query_one("#blocked-cancel").focus()

    def on_resize(self) -> None:
        fit_scroll(self, "#dialog-scroll")

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_override(self) -> None:
        picked = list(self.query_one("#blocked-checks", SelectionList).selected)
        reason = self.query_one("#blocked-reason", Input).value.strip()
        err = self.query_one("#blocked-error", Label)
        if not self.offered:
            err.update("nothing here can be overridden; wait, or fix the checks")
            return
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
