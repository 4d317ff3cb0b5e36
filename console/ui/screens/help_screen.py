"""Keys, the state glyphs, and what quitting does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from console.ui.render import STATE_GLYPHS

KEYS = (
    ("↑ ↓  j k", "move between phases"),
    ("r", "run the phase (checks first; a blocked phase offers overrides)"),
    ("s", "stop the phase (asks first; SIGTERM, then SIGKILL)"),
    ("c", "run its pre-flight checks"),
    ("v", "run its verify checks on what it produced"),
    ("l", "its log full screen: f follow/pause, / search, n N next/prev"),
    ("h", "its run history: who, when, exit, overrides; enter opens a run's log"),
    ("e", "show or fold the checks that pass"),
    ("J", "the journal: runs, checks, overrides and their reasons"),
    ("t", "next theme"),
    ("ctrl+p", "command palette: every action, every phase"),
    ("?", "this help"),
    ("q", "quit: phases keep running; start the console again to re-attach"),
)

STATE_TEXT = {
    "pending": "waits for the phases it needs",
    "blocked": "a pre-flight check fails",
    "ready": "can run",
    "running": "running (a service: up)",
    "verifying": "exited 0, verify checks running",
    "done": "finished and verified",
    "failed": "non-zero exit or verify failed",
    "stale": "an input changed after it finished",
    "stopped": "stopped by an operator",
}


def help_text() -> Content:
    parts: list[Content] = [Content.styled("Keys\n", "bold $accent")]
    for key, what in KEYS:
        parts.append(Content.assemble((f"  {key:<10}", "bold"), what, "\n"))
    parts.append(Content.styled("\nStates\n", "bold $accent"))
    for state, (glyph, style) in STATE_GLYPHS.items():
        parts.append(Content.assemble("  ", (glyph, style), f" {state:<10}", (STATE_TEXT[state], "$text-muted"), "\n"))
    parts.append(Content.assemble("  ", ("⚠", "$warning"), f" {'stalled':<10}",
                                  ("running, but no event and no log line for its stall_after", "$text-muted"), "\n"))
    parts.append(Content.styled(
        "\nPhases run in their own sessions: quitting the console, or losing SSH, never stops them.",
        "$text-muted"))
    return Content.assemble(*parts)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close", id="help.close", tooltip="Close help"),
    ]

    def __init__(self) -> None:
        super().__init__(classes="dialog")

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog-box") as box:
            box.border_title = "eagle3 console: help"
            yield Static(help_text(), classes="dialog-text")

    def action_close(self) -> None:
        self.dismiss(None)
