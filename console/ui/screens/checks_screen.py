"""A phase's checks full screen (`e`): every check with its verdict, message and evidence,
readable at 80x24, where the detail's pane is a few dozen cells wide."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.core.checks.result import CheckResult
from console.ui.components.checks.check_report import CheckReport, counts


class ChecksScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q,e", "close", "Back", id="checks-screen.close", tooltip="Back to the phases"),
    ]

    def __init__(self, phase_id: str, title: str, results: Sequence[CheckResult] | None, hint: str = "") -> None:
        super().__init__()
        self.phase_id = phase_id
        self.title_text = title
        self.results = tuple(results) if results is not None else None
        self.hint = hint

    def compose(self) -> ComposeResult:
        tally = counts(self.results) if self.results is not None else self.hint
        yield Static(Content.assemble((f" {self.phase_id} ", "bold reverse"), " ", (self.title_text, "bold"), "  ",
                                      (tally, "$text-muted")), id="checks-screen-header")
        with VerticalScroll(id="checks-screen-view"):
            if self.results is None:
                yield Static(Content.styled(self.hint or "not checked yet: press c", "$text-muted"))
            else:
                yield CheckReport(self.results, id="checks-screen-report")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#checks-screen-view").focus()

    def action_close(self) -> None:
        self.dismiss(None)
