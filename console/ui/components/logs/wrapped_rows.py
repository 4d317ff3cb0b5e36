"""A log's lines cut into rows at one width, for a pane narrower than its lines (the detail
log at 80x24). Kept up to date as lines are appended and the oldest leave, instead of
built again: a followed log adds lines many times a second and keeps a thousand."""

from __future__ import annotations

from pipeline.events import is_warning_line

WRAP_INDENT = "  "  # a wrapped line's next rows start here, so a new line stands out
WRAP_MAX_ROWS = 50  # rows one line may take; past them it ends in "…"


def _cut(text: str, room: int) -> tuple[str, str]:
    """The row `text` starts, and the rest: at the last space that leaves the row at least half
    full, so a number or a path is not cut in two ("0.3" / "81"); a word longer than that is."""
    if len(text) <= room:
        return text, ""
    space = text.rfind(" ", room // 2, room + 1)
    if space > 0:
        return text[:space], text[space + 1:]
    return text[:room], text[room:]


def wrap_rows(text: str, width: int) -> list[str]:
    """`text` cut into rows of `width` cells (a character a cell: log lines are mostly ASCII),
    between words where it can, the rows after the first indented."""
    if width <= len(WRAP_INDENT) + 4 or len(text) <= width:
        return [text]
    first, rest = _cut(text, width)
    rows, room = [first], width - len(WRAP_INDENT)
    while rest:
        if len(rows) == WRAP_MAX_ROWS:
            rows[-1] = rows[-1][:room + len(WRAP_INDENT) - 1] + "…"
            break
        row, rest = _cut(rest, room)
        rows.append(WRAP_INDENT + row)
    return rows


class WrappedRows:
    """The rows of the complete lines (`rows`, and beside each in `warned` whether its line is
    a warning, so a warning's every row is marked) and of the partial one (`partial_rows`).

    `sync(lines, width)` wraps the lines added since the last call (all of them after a width
    change or a `reset`); `cut(n)` drops the rows of the first n lines, as the log drops them."""

    def __init__(self) -> None:
        self.width = 0
        self.rows: list[str] = []
        self.warned: list[bool] = []
        self.counts: list[int] = []  # rows of each line wrapped so far
        self._partial: tuple[str, int, list[str]] = ("", 0, [])

    def reset(self) -> None:
        self.rows, self.warned, self.counts = [], [], []

    def sync(self, lines: list[str], width: int) -> None:
        if width != self.width:
            self.width = width
            self.reset()
        for text in lines[len(self.counts):]:
            rows = wrap_rows(text, width)
            self.rows.extend(rows)
            self.warned.extend([is_warning_line(text)] * len(rows))
            self.counts.append(len(rows))

    def cut(self, n: int) -> int:
        """Forget the first `n` lines; the rows they took."""
        n = min(n, len(self.counts))
        gone = sum(self.counts[:n])
        del self.counts[:n]
        del self.rows[:gone]
        del self.warned[:gone]
        return gone

    def partial_rows(self, text: str) -> list[str]:
        if not text:
            return []
        if self._partial[:2] != (text, self.width):
            self._partial = (text, self.width, wrap_rows(text, self.width))
        return self._partial[2]
