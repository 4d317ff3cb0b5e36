"""Each configured volume's used/free/total, its write rate and when it fills at that
rate; a loud line when a running phase still has more to write than fits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.lifecycle.snapshot import SpaceNeed
from console.core.telemetry.history import FILLING_B_PER_S, VolumeForecast
from console.core.telemetry.samples import DiskReading, VolumeSample
from console.ui.render import bar, fit, fmt_bytes, fmt_duration


def _short(n: float | None) -> str:
    """79G, 1.2T, 9.5G: a decimal only below 10 of a unit."""
    text = fmt_bytes(n, 1)
    try:
        return fmt_bytes(n, 0) if float(text[:-1]) >= 10 else text
    except ValueError:
        return text


_SEPARATORS = "/-_."
# The widest figures a line holds, so the path's column is the same at every look: "107G free"
# (and " of 1.1T" when wide), "full in 9h59m" (after "+999M/s  " when wide; ten days and more
# to full give way to the rate).
_FREE_W, _FREE_OF_W, _FULL_W, _RATE_W = 9, 8, 13, 9


def path_label(path: str, width: int) -> str:
    """The path in `width` cells, padded: whole when it fits, else its end from a folder
    (`…/.eagle3-demo`) or a word (`…demo`) on, so no word is cut; a last word longer than
    the room keeps its head (`scrat…`)."""
    if len(path) <= width:
        return path.ljust(width)
    for i in range(1, len(path)):
        starts = path[i] == "/" or (path[i - 1] in _SEPARATORS and path[i] not in _SEPARATORS)
        if starts and len(path) - i <= width - 1 and path[i:].strip(_SEPARATORS):
            return ("…" + path[i:]).ljust(width)
    last = path.rstrip("/").rsplit("/", 1)[-1] or path
    return (last if len(last) <= width else last[: max(0, width - 1)] + "…").ljust(width)


def path_width(width: int) -> int:
    """The path column: what a line of `width` leaves once its widest figures have room,
    never what this look's figures happen to take (a label that changes between two looks
    reads as another volume)."""
    bar_w = 10 if width >= 70 else 4
    figures = _FREE_W + _FREE_OF_W + _RATE_W + _FULL_W if width >= 60 else _FREE_W + _FULL_W
    return max(5, min(28, width - (1 + bar_w + 1 + figures + 1)))


def volume_line(v: VolumeSample, f: VolumeForecast | None, width: int) -> Content:
    """`path ▌bar 79G free [of 107G] +20M/s full in 3h05m`: figures from the space we may
    write (f_bavail, as `df` shows it), so the bar is used / (used + available)."""
    if v.error is not None:
        return Content.assemble(path_label(v.path, path_width(width)), " ", ("⚠ " + v.error, "$warning"))
    usable = (v.used + v.free) if v.used is not None and v.free is not None else None
    frac = v.used / usable if usable and v.used is not None else None
    rate = f.rate if f else None
    wide = width >= 60
    if rate is None:
        rate_s = "—"
    elif abs(rate) < FILLING_B_PER_S:
        rate_s = "idle"
    else:
        amount = fmt_bytes(abs(rate), 0 if abs(rate) >= 1e7 else 1) + "/s"
        # Space being freed is not a fill time: say so, with no minus sign to misread.
        rate_s = "+" + amount if rate > 0 else ("freeing " + amount if wide else "freeing")
    ttf = f.time_to_full if f is not None else None
    full = f"full in {fmt_duration(ttf)}" if ttf is not None else ""
    style = "$error" if frac is not None and frac > 0.95 else (
        "$warning" if frac is not None and frac > 0.85 else "$primary")
    full_style = "$warning" if ttf is not None and ttf < 6 * 3600 else "$text-muted"
    free = f"{_short(v.free)} free"
    if wide and usable is not None:
        free += f" of {_short(usable)}"
    bar_w = 10 if width >= 70 else 4
    head = Content.assemble(path_label(v.path, path_width(width)), " ", bar(frac, bar_w, style), " ", free, " ")
    room = max(0, width - head.cell_length)
    # Narrow: "full in" wins over the rate (it is the rate's meaning); both when wide.
    tails = [f"{rate_s}  {full}".strip(), full, rate_s] if wide else [full, rate_s]
    tail = next((t for t in tails if t and len(t) <= room), "")
    return Content.assemble(head, (tail, full_style))


@dataclass(frozen=True)
class DiskView:
    """What the panel draws of one poll: the reading, each volume's forecast and what the
    running phases still write there. Two equal views draw the same."""

    reading: DiskReading
    forecasts: Mapping[str, VolumeForecast] = field(default_factory=dict)
    needs: Mapping[str, SpaceNeed] = field(default_factory=dict)

    def warnings(self) -> list[tuple[str, SpaceNeed, VolumeForecast]]:
        """The volumes where what is left to write will not fit."""
        out = []
        for path, need in self.needs.items():
            f = self.forecasts.get(path)
            if f is not None and f.will_fit(need.bytes) is False:
                out.append((path, need, f))
        return out


def _rows(view: DiskView | None) -> int:
    if view is None:
        return 1
    return max(1, len(view.reading.volumes)) + len(view.warnings())


class DiskPanel(Widget):
    DEFAULT_CSS = "DiskPanel { height: auto; }"

    view: reactive[DiskView | None] = reactive(None, init=False)

    def show(self, reading: DiskReading, forecasts: Mapping[str, VolumeForecast],
             needs: Mapping[str, SpaceNeed]) -> None:
        self.view = DiskView(reading, forecasts, needs)

    def watch_view(self, old: DiskView | None, view: DiskView | None) -> None:
        self.set_class(view is not None and bool(view.warnings()), "-warning")
        if _rows(view) != _rows(old):  # a row more or less: a layout, not just a repaint
            self.refresh(layout=True)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return _rows(self.view)

    def render(self) -> Content:
        view = self.view
        if view is None:
            return Content.styled("reading volumes…", "$text-muted")
        if not view.reading.volumes:
            return Content.styled("no volumes configured", "$text-muted")
        width = self.content_region.width or self.size.width or 40
        lines = [volume_line(v, view.forecasts.get(v.path), width) for v in view.reading.volumes]
        for path, need, f in view.warnings():
            lines.append(Content.assemble(
                ("⚠ WILL NOT FIT: ", "bold $error"),
                (fit(f"{', '.join(need.phases)} still writes {fmt_bytes(need.bytes)}, "
                     f"{fmt_bytes(f.free)} free on {path}", width - 16), "$error"),
            ))
        return Content("\n").join(lines)
