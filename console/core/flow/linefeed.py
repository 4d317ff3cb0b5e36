"""A run's log copied out a line at a time under its phase's name (`[train] step 4/36 ...`),
so that the logs of phases running at once share one stream: a line goes out whole or not yet,
never beside half of another's."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from console.core.text.terminal_text import strip_controls

READ_BYTES = 1 << 20  # read a look at most; the rest waits for the next look
MAX_PARTIAL = 64 << 10  # a "line" this long with no newline yet goes out as it is


def shown(raw: bytes) -> str:
    """A line as a terminal would leave it: after its last carriage return (a progress bar's
    redraws), terminal controls removed."""
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    return strip_controls(text.rsplit("\r", 1)[-1])


class PrefixedLog:
    """One run's `output.log`, read by offset from its start (an attached run's whole log)."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.prefix = f"[{name}] "
        self.offset = 0
        self.partial = b""

    def pump(self, out: TextIO) -> bool:
        """Copy the lines finished since the last look; True when there were some."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(READ_BYTES)
        except FileNotFoundError:
            return False
        if not chunk:
            return False
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        if len(self.partial) > MAX_PARTIAL:
            lines.append(self.partial)
            self.partial = b""
        self._write(lines, out)
        return True

    def finish(self, out: TextIO) -> None:
        """The run has ended: its last lines, and a last one that had no newline."""
        while self.pump(out):
            pass
        if self.partial:
            self._write([self.partial], out)
            self.partial = b""

    def _write(self, lines: list[bytes], out: TextIO) -> None:
        if lines:
            out.write("".join(f"{self.prefix}{shown(raw)}\n" for raw in lines))
            out.flush()
