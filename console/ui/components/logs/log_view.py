"""A bounded log viewer that costs about what `less +F` does while it follows.

Lines live in a list capped at `max_lines`, and only the rows on screen are rendered
(toolong's approach). New lines are drawn about `FRAME_S` apart (never closer than
`FRAME_S - FRAME_SLACK`: the log feed posts at that pace, and a post that arrives a little
early is drawn at once rather than on a timer), and a frame sends only the rows whose text
changed since they were drawn (a progress bar rewritten with carriage returns repaints one
row); each row's strip comes from one rendered-line cache. While it
follows, the rows are pinned to the end and the scroll position is left alone, so a
phase printing 100 lines a second costs a few repaints of the pane a second and no layout;
the vertical scrollbar shows only while paused (following, the end is where you are).
Where the rows come from (the pane's region, the first line shown, the inherited style)
is worked out once a frame and once a compositor pass, not once a row: each of those
walks the DOM, and per row they cost more than drawing the row."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator
from itertools import groupby
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

from console.ui.components.logs.wrapped_rows import WrappedRows
from console.ui.pollers import FRAME_S, FRAME_SLACK
from console.ui.render import cut_left
from pipeline.events import is_warning_line

_MAX_WIDTH = 1000
ROW_BYTES_PER_S = 4000  # and a big pane waits longer, so its rows cost the terminal about this
ROW_OVERHEAD = 25  # bytes a repainted row costs beyond its cells (cursor move, style)


def _runs(rows: list[int]) -> Iterator[tuple[int, int]]:
    """Rows in ascending order as runs of consecutive ones, (first, last): one refresh a run."""
    for _, run in groupby(enumerate(rows), key=lambda iy: iy[1] - iy[0]):
        ys = [y for _, y in run]
        yield ys[0], ys[-1]

class LogView(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"log-view--match", "log-view--partial", "log-view--warning"}
    DEFAULT_CSS = """
    LogView { background: $surface; }
    LogView.-following { scrollbar-size-vertical: 0; }
    LogView > .log-view--match { background: $warning 60%; color: $text; }
    LogView > .log-view--partial { color: $text-muted; }
    LogView > .log-view--warning { color: $warning; text-style: bold; }
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

    def __init__(self, max_lines: int = 5000, titled: bool = False, frame_s: float = FRAME_S,
                 wrap: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.titled = titled  # the border title names the file and says following or paused
        self.wrap = wrap  # long lines take more rows (a narrow pane), instead of scrolling sideways
        self._wrapped = WrappedRows()
        self.source: str | None = None
        self.max_lines = max_lines
        self.frame_s = frame_s
        self.lines: list[str] = []
        self.partial = ""
        self.dropped = 0  # lines pushed out of memory since the last reset
        self.search: re.Pattern[str] | None = None
        self.frames = 0  # frames drawn for new lines (tests and the bench read it)
        self.rows_sent = 0  # rows those frames repainted
        self._width = 0
        self._drawn: dict[int, tuple[Any, ...]] = {}  # row on screen -> what was drawn there
        self._drawn_size = (0, 0)  # the pane's width and height when a row was last drawn
        self._strips: LRUCache[tuple[Any, ...], Strip] = LRUCache(1024)
        self._frame_timer: Timer | None = None
        self._last_frame = 0.0
        self._gap = frame_s
        self._pending = False
        self._in_pass = False
        self._rows_memo: tuple[list[str], list[str]] | None = None  # the wrapped rows, for a pass
        self._view: tuple[int, int, int, int] | None = None  # in a pass: width, height, top line, x
        self._style: Style | None = None  # in a pass: the style rows inherit
        self.add_class("-following")

    # -- content ------------------------------------------------------------------
    def clear(self) -> None:
        self._wrapped.reset()
        self.lines = []
        self.partial = ""
        self.dropped = 0
        self._width = 0
        self._drawn = {}
        self._sync_size()
        self.refresh()

    def append(self, lines: Iterable[str], partial: str = "") -> None:
        new = list(lines)
        if not new and partial == self.partial:
            return
        if self.wrap:
            self._wrapped.sync(self.lines, self._wrap_width())  # so a cut below is counted in rows
        cut = 0
        if len(new) >= self.max_lines:
            cut = len(self.lines) + len(new) - self.max_lines
            self.lines = new[-self.max_lines:]
            self._wrapped.reset()
        else:
            self.lines.extend(new)
            over = len(self.lines) - self.max_lines
            if over > 0:
                # Trim in chunks so a steady stream does not shift the list on every call.
                cut = over + self.max_lines // 10
                del self.lines[:cut]
        self.dropped += cut
        if cut and self.wrap and len(new) < self.max_lines:
            cut = self._wrapped.cut(cut)  # paused, the view moves up by rows, not lines
        self.partial = partial
        for ln in new[-200:]:
            if len(ln) > self._width:
                self._width = min(_MAX_WIDTH, len(ln))
        if len(partial) > self._width:
            self._width = min(_MAX_WIDTH, len(partial))
        if cut and not self.follow and self.is_attached:
            # Paused: keep the same lines in view while older ones leave memory.
            self.scroll_to(y=max(0, int(self.scroll_offset.y) - cut), animate=False, immediate=True)
        self._request_frame()

    @property
    def line_count(self) -> int:
        return len(self.lines) + (1 if self.partial else 0)

    # -- wrapped rows (wrap=True) ----------------------------------------------------
    def _wrap_width(self) -> int:
        return self.scrollable_content_region.width if self.is_attached else 0

    def _rows(self) -> tuple[list[str], list[str]]:
        """The rows of the complete lines and of the partial one, at the pane's width; worked
        out once a pass (the pane's width is a walk of the DOM, once a row it cost more than
        the row)."""
        if self._rows_memo is not None:
            return self._rows_memo
        self._wrapped.sync(self.lines, self._wrap_width())
        rows = self._wrapped.rows, self._wrapped.partial_rows(self.partial)
        if self._in_pass:
            self._rows_memo = rows
        return rows

    def line_count_rows(self) -> int:
        """Rows the content takes: its lines, or their wrapped rows."""
        if not (self.wrap and self._wrap_width()):
            return self.line_count
        rows, partial = self._rows()
        return len(rows) + len(partial)

    def text_at(self, index: int) -> str | None:
        if 0 <= index < len(self.lines):
            return self.lines[index]
        if index == len(self.lines) and self.partial:
            return self.partial
        return None

    @property
    def last_line(self) -> str | None:
        return self.partial or (self.lines[-1] if self.lines else None)

    @property
    def settled(self) -> bool:
        """True when every line appended so far has been handed to a frame."""
        return not self._pending

    # -- frames -------------------------------------------------------------------
    def _request_frame(self) -> None:
        if not self.is_attached:
            return
        self._pending = True
        if self._frame_timer is not None:
            return
        now = time.monotonic()
        due = self._last_frame + self._gap - FRAME_SLACK
        if due <= now:
            self._frame()
        else:
            # On the clock the pollers post by (pollers.py), so this frame and their readings
            # share one repaint: half seconds, whole ones for a pane big enough to wait longer.
            tick = FRAME_S if self._gap <= FRAME_S else 2 * FRAME_S
            self._frame_timer = self.set_timer(math.ceil(due / tick) * tick - now, self._frame)

    def _frame(self) -> None:
        self._frame_timer = None
        if not self._pending:
            return
        self._pending = False
        self._last_frame = time.monotonic()
        self.frames += 1
        self._sync_size()
        if not self.follow:
            return  # paused: the rows in view are the same lines; only the scroll range grew
        self._in_pass = True  # the rows' keys below share one look at the pane
        try:
            view = self._where()
            width, height = view[0], view[1]
            drawn = self._drawn
            changed = [y for y in range(height) if drawn.get(y) != self._key(y, view)]
        finally:
            self._in_pass = False
            self._view = self._style = self._rows_memo = None
        self.rows_sent += len(changed)
        self._gap = max(self.frame_s, len(changed) * (width + ROW_OVERHEAD) / ROW_BYTES_PER_S)
        for first, last in _runs(changed):
            self.refresh(Region(0, first, width, last - first + 1))

    def _sync_size(self) -> None:
        """The virtual size bounds scrolling. Following, the rows are pinned to the end and
        the vertical scrollbar is hidden, so only a wider line needs a layout."""
        if not self.is_attached:
            return
        if self.wrap and self._wrap_width():
            size = Size(self._wrap_width(), self.line_count_rows())
        else:
            size = Size(self._width, self.line_count)
        if self.follow:
            if size.width != self.virtual_size.width:
                self.virtual_size = Size(size.width, self.virtual_size.height)
            return
        if size.width != self.virtual_size.width:
            self.virtual_size = size
        elif size != self.virtual_size:
            # Paused and longer: the rows in view stay, so move only the scrollbar's thumb
            # (assigning virtual_size would repaint every row).
            self.set_reactive(LogView.virtual_size, size)
            self._scroll_update(size)

    @property
    def end_y(self) -> int:
        return max(0, self.line_count_rows() - self.scrollable_content_region.height)

    def on_mount(self) -> None:
        self._sync_size()
        self._title()

    def on_resize(self) -> None:
        self._title()
        region = self.scrollable_content_region
        if (region.width, region.height) != self._drawn_size:
            # Drawn at another size; a resize also comes after a layout that only changed the
            # scroll range, once the rows are already drawn at this size, and those still hold.
            self._drawn = {}
            if self.wrap:
                self._sync_size()  # as many rows as the new width wraps to

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

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self.follow:
            self.follow = False
            self._scroll_by(-3)
            event.prevent_default()

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
        ahead = range(top + 1, n) if forward else range(top - 1, -1, -1)
        # Past the last match, wrap around to the other end, as less and vim do.
        order = [*ahead, *(range(0, top + 1) if forward else range(n - 1, top - 1, -1))]
        for i in order:
            text = self.text_at(i)
            if text is not None and self.search.search(text):
                self.follow = False
                self.scroll_to(y=i, animate=False, immediate=True)
                return i
        return None

    # -- rendering ----------------------------------------------------------------------
    def _where(self) -> tuple[int, int, int, int]:
        """The pane's width and height, the index of the line on its first row and the
        horizontal scroll; kept for the rest of a compositor pass."""
        if self._view is not None:
            return self._view
        region = self.scrollable_content_region
        scroll_x, scroll_y = self.scroll_offset
        top = max(0, self.line_count_rows() - region.height) if self.follow else scroll_y
        view = (region.width, region.height, top, scroll_x)
        if self._in_pass:
            self._view = view
        return view

    def _base_style(self) -> Style:
        """The style rows inherit (a walk up the DOM); kept for the rest of a compositor pass."""
        style = self._style
        if style is None:
            style = self.rich_style
            if self._in_pass:
                self._style = style
        return style

    def _key(self, y: int, view: tuple[int, int, int, int]) -> tuple[Any, ...]:
        width, _, top, scroll_x = view
        index = top + y
        pattern = self.search.pattern if self.search is not None else None
        if self.wrap and width:
            rows, partial_rows = self._rows()
            if index < len(rows):
                return (rows[index], False, 0, width, pattern, self._wrapped.warned[index])
            rest = index - len(rows)
            partial = rest < len(partial_rows)
            return (partial_rows[rest] if partial else None, partial, 0, width, pattern,
                    partial and is_warning_line(self.partial))
        lines = self.lines
        if index < len(lines):
            text: str | None = lines[index]
            partial = False
        else:
            text = self.text_at(index)
            partial = text is not None
        return (text, partial, scroll_x, width, pattern, text is not None and is_warning_line(text))

    def render_lines(self, crop: Region) -> list[Strip]:
        self._in_pass = True
        self._view = self._style = self._rows_memo = None
        try:
            return super().render_lines(crop)
        finally:
            self._in_pass = False
            self._view = self._style = self._rows_memo = None

    def render_line(self, y: int) -> Strip:
        view = self._where()
        width = view[0]
        key = self._key(y, view)
        self._drawn[y] = key
        self._drawn_size = (view[0], view[1])
        base = self._base_style()
        cached = self._strips.get((*key, base))
        if cached is not None:
            return cached
        text, partial, scroll_x, _, _, warned = key
        if text is None:
            strip = Strip.blank(width, base)
        else:
            style = base + self.get_component_rich_style("log-view--partial", partial=True) if partial else base
            if warned:
                style += self.get_component_rich_style("log-view--warning", partial=True)
            visible = text[scroll_x: scroll_x + width]
            if self.search is None and style == base and visible.isascii() and visible.isprintable():
                # One segment, padding included: the terminal gets one style change a row.
                strip = Strip([Segment(visible.ljust(width), base)], width)
            else:
                strip = Strip(self._segments(visible, style)).adjust_cell_length(width, base)
        self._strips[(*key, base)] = strip
        return strip

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
    def _scroll_by(self, rows: int) -> None:
        # Forced: the scrollbar that allows scrolling shows only from the next layout on.
        self.scroll_to(y=max(0, int(self.scroll_offset.y) + rows), animate=False, immediate=True, force=True)

    def action_scroll_up(self) -> None:
        self.follow = False
        self._scroll_by(-1)

    def action_page_up(self) -> None:
        self.follow = False
        self._scroll_by(-max(1, self.scrollable_content_region.height))

    def action_scroll_home(self) -> None:
        self.follow = False
        self.scroll_to(y=0, animate=False, immediate=True, force=True)

    def action_scroll_end(self) -> None:
        self.follow = True

    def watch_follow(self, follow: bool) -> None:
        self.set_class(follow, "-following")
        self._sync_size()
        if not follow and self.is_attached:
            # Paused where it was following: at the end, from where a scroll or search moves.
            self.scroll_to(y=self.end_y, animate=False, immediate=True, force=True)
        self._drawn = {}
        self.refresh()
        self._title()
