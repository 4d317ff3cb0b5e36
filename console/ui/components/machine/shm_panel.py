"""/dev/shm used and free, and the file count and bytes of the configured dump folder."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.core.telemetry.samples import ShmReading
from console.ui.render import bar, fit_words, fmt_bytes, fmt_pair


class ShmPanel(Widget):
    DEFAULT_CSS = "ShmPanel { height: 1; }"

    reading: reactive[ShmReading | None] = reactive(None)

    def show(self, reading: ShmReading) -> None:
        self.reading = reading

    def render(self) -> Content:
        r = self.reading
        if r is None:
            return Content.styled("reading /dev/shm…", "$text-muted")
        width = self.content_region.width or self.size.width or 40
        if r.error is not None:
            return Content.assemble("shm ", ("⚠ " + r.error, "$warning"))
        frac = r.used / r.total if r.used is not None and r.total else None
        if width < 56:
            # One row at 80 columns: used/total says what the bar and "free" would.
            head = Content.assemble("shm ", fmt_pair(r.used, r.total))
        else:
            head = Content.assemble(
                "shm ", bar(frac, 6), " ", fmt_pair(r.used, r.total), " ",
                (f"free {fmt_bytes(r.free)}", "$text-muted"),
            )
        if r.dump_path is None:
            return head
        err = getattr(r, "dump_error", None)
        if err:
            dump = f"dump {r.dump_path}: {err}"
        elif r.dump_files is None:
            dump = f"dump {r.dump_path}: N/A"
        else:
            more = "+" if getattr(r, "dump_truncated", False) else ""
            dump = f"dump {r.dump_files}{more} files {fmt_bytes(r.dump_bytes)}"
        return Content.assemble(head, "  ", fit_words(dump, max(0, width - head.cell_length - 2)))
