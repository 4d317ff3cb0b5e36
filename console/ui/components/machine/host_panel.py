"""Host CPU, memory and load on one line."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.telemetry.samples import HostReading
from console.ui.render import bar, fmt_pair


class HostPanel(Widget):
    DEFAULT_CSS = "HostPanel { height: 1; }"

    reading: reactive[HostReading | None] = reactive(None)

    def show(self, reading: HostReading) -> None:
        self.reading = reading

    def render(self) -> Content:
        r = self.reading
        if r is None:
            return Content.styled("reading host…", "$text-muted")
        cpu = "N/A" if r.cpu_percent is None else f"{r.cpu_percent:3.0f}%"
        frac = None if r.mem_used is None or not r.mem_total else r.mem_used / r.mem_total
        load = "N/A" if r.load is None else " ".join(f"{x:.1f}" for x in r.load)
        ncpu = getattr(r, "cpu_count", None)
        width = self.content_region.width or self.size.width or 80
        if width < 44:  # 80 columns: the 1-minute load only
            one = "N/A" if r.load is None else f"{r.load[0]:.1f}"
            return Content.assemble("cpu ", cpu.strip(), " mem ", fmt_pair(r.mem_used, r.mem_total), " load ", one,
                                    ((f"/{ncpu}" if ncpu else ""), "$text-muted"))
        if width < 60:
            return Content.assemble(
                "cpu ", cpu, "  mem ", fmt_pair(r.mem_used, r.mem_total), "  load ", load)
        return Content.assemble(
            "cpu ", bar(None if r.cpu_percent is None else r.cpu_percent / 100, 6), " ", cpu,
            ("  mem ", ""), bar(frac, 6), " ", fmt_pair(r.mem_used, r.mem_total),
            ("  load ", ""), load, ((f" /{ncpu}" if ncpu else ""), "$text-muted"),
        )
