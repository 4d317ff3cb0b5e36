"""Keys, the state glyphs, and what quitting does."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widget import Widget

from console.core.lifecycle.state import State
from console.ui.render import state_style

KEYS = (
    ("↑ ↓  j k", "move between phases"),
    ("r", "run the phase (checks first; a blocked phase offers overrides)"),
    ("s", "stop the phase (asks first; SIGTERM, then SIGKILL)"),
    ("c", "run its pre-flight checks"),
    ("v", "run its verify checks on what it produced"),
    ("l", "its log full screen: f follow/pause, / search, n N next/prev"),
    ("h", "its run history: who, when, exit, overrides; enter opens a run's log"),
    ("e", "every check of the phase full screen: verdict, message, evidence"),
    ("n", "the next running phase: its log, stats and checks"),
    ("d", "set or clear the deadline: running phases get the stop s sends at it"),
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
    "stopped": "stopped by an operator, or at the deadline: run again, it resumes",
}


KEY_W = 14  # "  ◐ verifying ": where every description starts (the longest state and a space), and where it continues


def _hanging(label: Content, text: str, style: str, width: int | None, indent: int = KEY_W) -> list[Content]:
    """`label` then `text`, wrapped to `width` with its continuation lines under the text's
    first column (a hanging indent), not at column 0."""
    if width is None or width <= indent + 8:
        return [Content.assemble(label, (text, style))]
    lines = Content(text).wrap(width - indent)
    out = [Content.assemble(label, (lines[0].plain if lines else "", style))]
    out += [Content.assemble(" " * indent, (ln.plain, style)) for ln in lines[1:]]
    return out


def help_text(width: int | None = None) -> Content:
    rows: list[Content] = [*_hanging(Content(""), "esc closes this help (q and ? too)", "$text-muted", width, indent=0),
                           Content(""), Content.styled("Keys", "bold $accent")]
    for key, what in KEYS:
        rows += _hanging(Content.styled(f"  {key:<{KEY_W - 2}}", "bold"), what, "", width)
    rows += [Content(""), Content.styled("States", "bold $accent")]
    for state in State:
        label = Content.assemble("  ", (state.glyph, state_style(state)), f" {state:<{KEY_W - 4}}")
        rows += _hanging(label, STATE_TEXT[state], "$text-muted", width)
    label = Content.assemble("  ", ("⚠", "$warning"), f" {'stalled':<{KEY_W - 4}}")
    rows += _hanging(label, "running, but no event and no log line for its stall_after", "$text-muted", width)
    rows.append(Content(""))
    rows += _hanging(Content(""), "Phases run in their own sessions: quitting the console, or losing SSH, never "
                     "stops them.", "$text-muted", width, indent=0)
    return Content("\n").join(rows)


class HelpText(Widget):
    """The help, wrapped at the width it is drawn at (so the indent hangs at any size)."""

    DEFAULT_CSS = "HelpText { height: auto; }"

    def render(self) -> Content:
        return help_text(self.content_region.width or self.size.width or None)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(help_text(width or None).plain.split("\n"))


CLOSES = "esc closes"
MORE = "▼ more below: ↓ or pgdn · esc closes"


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close", id="help.close", tooltip="Close help"),
    ]

    def __init__(self) -> None:
        super().__init__(classes="dialog")

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog-box") as box:
            box.border_title = "eagle3 console: help"
            box.border_subtitle = CLOSES
            yield HelpText(classes="dialog-text", id="help-text")

    def on_mount(self) -> None:
        """The arrows and page keys scroll the help; its frame says when more is below (at
        80x24 the help is taller than the screen, and a scrollbar's thumb alone read as part
        of the text)."""
        box = self.query_one("#dialog-box", VerticalScroll)
        box.focus()
        self.watch(box, "scroll_y", self._cue, init=False)
        self.watch(box, "virtual_size", self._cue, init=False)
        self.call_after_refresh(self._cue)

    def _cue(self, _: object = None) -> None:
        box = self.query_one("#dialog-box", VerticalScroll)
        box.border_subtitle = MORE if box.max_scroll_y - box.scroll_y >= 1 else CLOSES

    def action_close(self) -> None:
        self.dismiss(None)
