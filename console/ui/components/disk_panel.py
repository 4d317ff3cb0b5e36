"""Each configured volume's used/free/total, its write rate and when it fills at that
rate; a loud line when a running phase still has more to write than fits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.telemetry.history import FILLING_B_PER_S, VolumeForecast
from console.core.telemetry.samples import DiskReading, VolumeSample
from console.core.lifecycle.snapshot import SpaceNeed
from console.ui.render import bar, fit, fmt_bytes, fmt_duration


def _short(n: float | None) -> str:
    """79G, 1.2T, 9.5G: a decimal only below 10 of a unit."""
    text = fmt_bytes(n, 1)
    try:
        return fmt_bytes(n, 0) if float(text[:-1]) >= 10 else text
    except ValueError:
        return text


def _path(path: str, width: int) -> str:
    return path.ljust(width) if len(path) <= width else "…" + path[-(width - 1):]


def volume_line(v: VolumeSample, f: VolumeForecast | None, width: int) -> Content:
    """`path ▌bar 79G free [of 107G] +20M/s full in 3h05m`: figures from the space we may
    write (f_bavail, as `df` shows it), so the bar is used / (used + available)."""
    if v.error is not None:
        return Content.assemble(_path(v.path, max(8, min(28, width // 4))), " ",
                                ("⚠ " + v.error, "$warning"))
    usable = (v.used + v.free) if v.used is not None and v.free is not None else None
    frac = v.used / usable if usable else None
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
    # Narrow: "full in" wins over the rate (it is the rate's meaning); both when wide.
    tail = f"{rate_s}  {full}".strip() if wide else (full or rate_s)
    bar_w = 10 if width >= 70 else 4
    fixed = 1 + bar_w + 1 + len(free) + 1 + len(tail)
    path_w = max(5, min(28, width - fixed))
    head = Content.assemble(_path(v.path, path_w), " ", bar(frac, bar_w, style), " ", free, " ")
    return Content.assemble(head, (fit(tail, max(0, width - head.cell_length)), full_style))


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
