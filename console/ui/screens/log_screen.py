"""A phase's log full screen: follow or pause, search within the lines kept in memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from console.ui.components.logs.log_view import LogView
from console.ui.logfeed import LogFeed
from console.ui.messages import LogLines
from console.ui.pollers import Poller
from console.ui.render import cut_left

MAX_LINES = 20000


@dataclass(frozen=True)
class LogHeading:
    """What the header says: phase, follow state, lines kept, the search and the file, at
    the screen's width. Two equal headings draw the same."""

    phase_id: str
    following: bool
    kept: int
    search: str | None  # the pattern looked for
    path: str | None
    width: int

    def content(self) -> Content:
        """The state before the path, and the path cut from the left (its end tells files
        apart), so 80 columns keep all four."""
        state = ("following", "$success") if self.following else ("paused (f or end: follow)", "$warning")
        search = f"  search: {self.search}".replace("\\", "") if self.search is not None else ""
        kept = f"  {self.kept} lines kept{search}  "
        head = Content.assemble((f" {self.phase_id} ", "bold reverse"), " ", state, (kept, "$text-muted"))
        room = max(8, self.width - head.cell_length - 1)
        path = cut_left(self.path, room) if self.path else "no log yet (the phase has not run)"
        return Content.assemble(head, (path, "$text-muted"))


class LogHeader(Static):
    view: var[LogHeading | None] = var(None, init=False)

    def watch_view(self, view: LogHeading | None) -> None:
        if view is not None:
            self.update(view.content())


class LogScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q,l", "close", "Back", id="log-screen.close", tooltip="Back to the phases"),
        Binding("f", "toggle_follow", "Follow/pause", id="log-screen.follow",
                tooltip="Follow new lines, or pause to read"),
        Binding("slash", "search", "Search", id="log-screen.search", tooltip="Search the kept lines"),
        Binding("n", "next_match", "Next", id="log-screen.next", tooltip="Next match"),
        Binding("N", "prev_match", "Prev", id="log-screen.prev", tooltip="Previous match"),
    ]

    def __init__(self, phase_id: str, path_of: Callable[[], str | None], interval: float = 0.25) -> None:
        super().__init__()
        self.phase_id = phase_id
        self.path_of = path_of
        self.feed = LogFeed(f"screen:{phase_id}", path_of, MAX_LINES, paced=True)
        self.poller = Poller(self, f"log-screen-{phase_id}", interval, self.feed.read)
        self.path: str | None = None

    def compose(self) -> ComposeResult:
        yield LogHeader(id="log-screen-header")
        yield LogView(max_lines=MAX_LINES, id="log-screen-view")
        yield Input(placeholder="search (enter: find, esc: close)", id="log-screen-search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log-screen-search").display = False
        self.query_one(LogView).focus()
        self._header()
        self.poller.start()

    def on_unmount(self) -> None:
        self.poller.stop()

    def on_log_lines(self, msg: LogLines) -> None:
        view = self.query_one(LogView)
        if msg.reset:
            view.clear()
            self.path = msg.path
        view.append(msg.lines, msg.partial)
        self._header()

    def _header(self) -> None:
        view = self.query_one(LogView)
        self.query_one(LogHeader).view = LogHeading(
            self.phase_id, view.follow, len(view.lines), view.search.pattern if view.search is not None else None,
            self.path, self.size.width or 80)

    def on_resize(self) -> None:
        self._header()

    def action_close(self) -> None:
        box = self.query_one("#log-screen-search", Input)
        if box.display:
            box.display = False
            self.query_one(LogView).focus()
            return
        self.dismiss(None)

    def action_toggle_follow(self) -> None:
        view = self.query_one(LogView)
        view.follow = not view.follow
        self._header()

    def action_search(self) -> None:
        box = self.query_one("#log-screen-search", Input)
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        view = self.query_one(LogView)
        view.set_search(event.value or None)
        event.input.display = False
        view.focus()
        if event.value:
            found = view.find(forward=False) if view.follow else view.find(forward=True)
            if found is None:
                found = view.find(forward=True)
            if found is None:
                self.notify(f"'{event.value}' is not in the {len(view.lines)} kept lines", severity="warning")
        self._header()

    def action_next_match(self) -> None:
        if self.query_one(LogView).find(forward=True) is None:
            self.notify("no further match", severity="information")
        self._header()

    def action_prev_match(self) -> None:
        if self.query_one(LogView).find(forward=False) is None:
            self.notify("no earlier match", severity="information")
        self._header()
