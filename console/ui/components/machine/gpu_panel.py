"""Per GPU: name, utilization with a 60-second sparkline, memory, temperature, power
against its limit, and which phase owns the processes on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.telemetry.history import GpuHistory
from console.core.telemetry.samples import GpuReading, GpuSample
from console.ui.render import fit, fmt_pair, sparkline

HISTORY = 60


@dataclass(frozen=True)
class GpuView:
    """What the panel draws of one poll: the reading, and the phase that owns each process
    (pid -> phase id). Two equal views draw the same, so an unchanged one draws nothing."""

    reading: GpuReading
    owners: Mapping[int, str] = field(default_factory=dict)


def _shape(view: GpuView | None) -> tuple[object, ...]:
    return (None,) if view is None else (view.reading.error, len(view.reading.gpus))


def owner_of(g: GpuSample, owners: Mapping[int, str]) -> str:
    """The phases whose processes run on `g`, and how many processes no phase owns."""
    if g.processes_unknown:
        return "?"
    phases: list[str] = []
    others = 0
    for p in g.processes:
        ph = owners.get(p.pid)
        if ph is None:
            others += 1
        elif ph not in phases:
            phases.append(ph)
    out = ",".join(phases)
    if others:
        out += ("+" if out else "") + f"{others} other"
    return out or "idle"


class GpuPanel(Widget):
    DEFAULT_CSS = "GpuPanel { height: auto; }"

    view: reactive[GpuView | None] = reactive(None, init=False)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.history = GpuHistory(seconds=HISTORY)

    def show(self, reading: GpuReading, owners: Mapping[int, str]) -> None:
        self.view = GpuView(reading, owners)

    def watch_view(self, old: GpuView | None, view: GpuView | None) -> None:
        if view is None:
            return
        reading = view.reading
        if old is None or old.reading != reading:  # a poll is a sample of the sparkline; new owners are not
            self.history.add(reading)
        names = {g.name for g in reading.gpus if g.name}
        title = "GPU"
        if reading.error is None and reading.gpus:
            title = f"GPU · {len(reading.gpus)}× {names.pop() if len(names) == 1 else 'mixed'}"
            if reading.driver:
                title += f" · driver {reading.driver}"
        if self.border_title != title:
            self.border_title = title
        if _shape(view) != _shape(old):  # another row count: a layout, not just a repaint
            self.refresh(layout=True)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        r = self.view.reading if self.view is not None else None
        if r is not None and r.error is not None:
            # As many rows as the words wrap to: counting characters lost "Not Found".
            return max(1, len(self.render().wrap(max(1, width))))
        if r is None or not r.gpus:
            return 1
        return len(r.gpus)

    def render(self) -> Content:
        if self.view is None:
            return Content.styled("reading GPUs…", "$text-muted")
        r = self.view.reading
        if r.error is not None:
            return Content.assemble(("⚠ ", "$warning"), (r.error, "$text-muted"))
        if not r.gpus:
            return Content.styled("no GPUs found", "$text-muted")
        width = self.content_region.width or self.size.width or 40
        return Content("\n").join(self._line(g, width, self.view.owners) for g in r.gpus)

    def _line(self, g: GpuSample, width: int, owners: Mapping[int, str]) -> Content:
        idx = f"{g.index}".rjust(2)
        if g.name is None and g.utilization is None and g.memory_used is None:
            return Content.assemble((idx, "$text-muted"), " ",
                                    ("N/A  queries failing (NVML)", "$error"))
        util = "N/A" if g.utilization is None else f"{g.utilization:3.0f}%"
        mem = fmt_pair(g.memory_used, g.memory_total)
        temp = "N/A" if g.temperature is None else f"{g.temperature:.0f}°"
        owner = owner_of(g, owners)
        hist = self.history.utilization(g.index)
        owner_style = "$text-muted" if owner in ("idle", "?") else "$accent"
        if width >= 76:
            power = "N/A" if g.power is None else f"{g.power:.0f}"
            limit = "" if g.power_limit is None else f"/{g.power_limit:.0f}"
            name = fit(g.name or "N/A", 14)
            fixed = 2 + 1 + 14 + 1 + 1 + 5 + 10 + 1 + 5 + 10 + 1
            spark_w = max(8, min(HISTORY, width - fixed - 14))
            return Content.assemble(
                (idx, "$text-muted"), " ", name, " ",
                (sparkline(hist, spark_w, 0, 100), "$primary"), " ",
                util.rjust(4), " ", mem.rjust(9), " ", temp.rjust(4), " ",
                f"{power}{limit}W".rjust(9), " ",
                (fit(owner, max(4, width - fixed - spark_w - 1)), owner_style),
            )
        power = "N/A" if g.power is None else f"{g.power:.0f}W"
        spark_w = max(4, min(HISTORY, width - 37))
        rest = width - (2 + 1 + spark_w + 1 + 4 + 1 + 9 + 1 + 4 + 1 + 5 + 1)
        return Content.assemble(
            (idx, "$text-muted"), " ", (sparkline(hist, spark_w, 0, 100), "$primary"), " ",
            util.rjust(4), " ", mem.rjust(9), " ", temp.rjust(4), " ", power.rjust(5), " ",
            (fit(owner, max(0, rest)), owner_style),
        )
