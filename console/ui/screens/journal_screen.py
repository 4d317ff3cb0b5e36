"""The journal full screen: every run, check, override (with its reason) and stop, for one
phase or all of them."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.ui.components.logs.journal_view import JournalView
from console.ui.messages import JournalRead
from console.ui.pollers import Poller

LIMIT = 1000


class JournalScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q,J", "close", "Back", id="journal-screen.close", tooltip="Back to the phases"),
        Binding("a", "toggle_all", "All/phase", id="journal-screen.all",
                tooltip="Show every phase's records, or only the selected phase's"),
    ]

    def __init__(self, project: Any, phase_id: str | None, interval: float = 2.0) -> None:
        super().__init__()
        self.project = project
        self.phase_id = phase_id
        self.all = phase_id is None
        self.poller = Poller(self, "journal-screen", interval, self._read)
        self.records: list[dict[str, Any]] = []

    def _read(self) -> JournalRead:
        phase = None if self.all else self.phase_id
        return JournalRead(phase, self.project.journal.read(phase=phase, limit=LIMIT))

    def compose(self) -> ComposeResult:
        yield Static(id="journal-screen-header")
        yield JournalView(id="journal-screen-view")
        yield Footer()

    def on_mount(self) -> None:
        self._header()
        self.query_one(JournalView).focus()
        self.poller.start()

    def on_unmount(self) -> None:
        self.poller.stop()

    def _header(self) -> None:
        scope = "all phases" if self.all else f"phase {self.phase_id}"
        self.query_one("#journal-screen-header", Static).update(Content.assemble(
            (" journal ", "bold reverse"), " ", scope, "  ",
            (str(self.project.journal.path), "$text-muted")))

    def on_journal_read(self, msg: JournalRead) -> None:
        if msg.phase_id != (None if self.all else self.phase_id):
            return
        self.records = msg.records
        self.query_one(JournalView).show(msg.records, show_phase=self.all)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_toggle_all(self) -> None:
        if self.phase_id is None:
            return
        self.all = not self.all
        self._header()
        self.poller.poke()
