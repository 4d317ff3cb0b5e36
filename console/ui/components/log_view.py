"""A bounded log viewer: lines live in a list capped at `max_lines`, and only the rows
on screen are rendered (toolong's approach), so a phase printing 100k lines a second
costs a list append and a redraw of what is visible."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.ui.render import cut_left

_MAX_WIDTH = 1000


class LogView(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"log-view--match", "log-view--partial"}
    DEFAULT_CSS = """
    LogView { background: $surface; }
    LogView > .log-view--match { background: $warning 60%; color: $text; }
    LogView > .log-view--partial { color: $text-muted; }
    """
    BINDINGS = [
        Binding("up,k", "scroll_up", "Up", show=False, id="log.up", tooltip="Scroll up (pauses follow)"),
        Binding("down,j", "scroll_down", "Down", show=False, id="log.down", tooltip="Scroll down"),
        Binding("pageup", "page_up", "Page up", show=False, id="log.page-up", tooltip="Page up (pauses follow)"),
        Binding("pagedown", "page_down", "Page down", show=False, id="log.page-down", tooltip="Page down"),
        Binding("home", "scroll_home", "Top", show=False, id="log.home", tooltip="First kept line (pauses follow)"),
        Binding("end", "scroll_end", "End", show=False, id="log.end", tooltip="Last line (resumes follow)"),
    ]

    follow: reactive[bool] = reactive(True)

    def __init__(self, max_lines: int = 5000, titled: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.titled = titled  # the border title names the file and says following or paused
        self.source: str | None = None
        self.max_lines = max_lines
        self.lines: list[str] = []
        self.partial = ""
        self.dropped = 0  # lines pushed out of memory since the last reset
        self.search: re.Pattern[str] | None = None
        self._width = 0

    # -- content ------------------------------------------------------------------
    def clear(self) -> None:
        self.lines = []
        self.partial = ""
        self.dropped = 0
        self._width = 0
        self._resize()

    def append(self, lines: Iterable[str], partial: str = "") -> None:
        new = list(lines)
        if len(new) >= self.max_lines:
            self.dropped += len(self.lines) + len(new) - self.max_lines
            self.lines = new[-self.max_lines:]
        else:
            self.lines.extend(new)
            over = len(self.lines) - self.max_lines
            if over > 0:
                # Trim in chunks so a steady stream does not shift the list on every call.
                cut = over + self.max_lines // 10
                del self.lines[:cut]
                self.dropped += cut
        self.partial = partial
        for ln in new[-200:]:
            if len(ln) > self._width:
                self._width = min(_MAX_WIDTH, len(ln))
        if len(partial) > self._width:
            self._width = min(_MAX_WIDTH, len(partial))
        self._resize()

    @property
    def line_count(self) -> int:
        return len(self.lines) + (1 if self.partial else 0)

    def text_at(self, index: int) -> str | None:
        if 0 <= index < len(self.lines):
            return self.lines[index]
        if index == len(self.lines) and self.partial:
            return self.partial
        return None

    @property
    def last_line(self) -> str | None:
        return self.partial or (self.lines[-1] if self.lines else None)

    def _resize(self) -> None:
        if not self.is_attached:
            return
        self.virtual_size = Size(self._width, self.line_count)
        if self.follow:
            self._to_end()
            # The new virtual size bounds scrolling only after the next layout: follow again then.
            self.call_after_refresh(self._to_end)
        self.refresh()

    @property
    def end_y(self) -> int:
        return max(0, self.line_count - self.scrollable_content_region.height)

    def _to_end(self, tries: int = 50) -> None:
        """Keeps the scroll position (and so the scrollbar) at the end while following; the
        rows drawn are pinned to the end regardless (render_line)."""
        if not self.follow:
            return
        self.scroll_to(y=self.end_y, animate=False, immediate=True)
        if int(self.scroll_offset.y) != self.end_y and tries > 0:
            self.set_timer(0.02, lambda: self._to_end(tries - 1))

    def on_mount(self) -> None:
        self._resize()
        self._title()

    def on_resize(self) -> None:
        self._title()
        if self.follow:
            self.call_after_refresh(self._to_end)

    def set_source(self, path: str | None) -> None:
        if path != self.source:
            self.source = path
            self._title()

    def _title(self) -> None:
        if not self.titled:
            return
        state = "following" if self.follow else "paused · end: follow"
        if self.source is None:
            self.border_title = "log · none yet (never run)"
            return
        room = max(8, (self.size.width or 60) - len(state) - 12)
        self.border_title = f"log · {state} · {cut_left(self.source, room)}"

    def on_mouse_scroll_up(self) -> None:
        self.follow = False

    # -- search ---------------------------------------------------------------------
    def set_search(self, text: str | None) -> None:
        self.search = re.compile(re.escape(text), re.IGNORECASE) if text else None
        self.refresh()

    def find(self, forward: bool = True) -> int | None:
        """Scroll to the next (or previous) kept line matching the search; its index."""
        if self.search is None or not self.lines:
            return None
        top = int(self.scroll_offset.y)
        if self.follow:
            top = max(0, self.line_count - self.scrollable_content_region.height)
        n = self.line_count
        order = range(top + 1, n) if forward else range(top - 1, -1, -1)
        # Past the last match, wrap around to the other end, as less and vim do.
        order = [*order, *(range(0, top + 1) if forward else range(n - 1, top - 1, -1))]
        for i in order:
            text = self.text_at(i)
            if text is not None and self.search.search(text):
                self.follow = False
                self.scroll_to(y=i, animate=False, immediate=True)
                return i
        return None

    # -- rendering ----------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        if self.follow:  # pinned to the end, whatever the scroll position has caught up with
            scroll_y = self.end_y
        index = scroll_y + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        text = self.text_at(index)
        if text is None:
            return Strip.blank(width, base)
        style = base
        if index == len(self.lines) and self.partial:
            style = base + self.get_component_rich_style("log-view--partial", partial=True)
        visible = text[scroll_x: scroll_x + width]
        segments = self._segments(visible, style)
        return Strip(segments).adjust_cell_length(width, base)

    def _segments(self, text: str, style: Style) -> list[Segment]:
        if self.search is None:
            return [Segment(text, style)]
        match_style = style + self.get_component_rich_style("log-view--match", partial=True)
        out: list[Segment] = []
        pos = 0
        for m in self.search.finditer(text):
            if m.start() > pos:
                out.append(Segment(text[pos:m.start()], style))
            if m.end() > m.start():
                out.append(Segment(text[m.start():m.end()], match_style))
            pos = m.end()
        if pos < len(text):
            out.append(Segment(text[pos:], style))
        return out

    # -- follow -----------------------------------------------------------------------
    def action_scroll_up(self) -> None:
        self.follow = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.follow = False
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.follow = False
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        self.follow = True
        self._resize()

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self._resize()
        self._title()
