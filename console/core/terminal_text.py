"""Text from files a phase or an operator wrote, made safe to print on a terminal.

A phase's log, a check message or an override reason may hold escape sequences (OSC 52
writes the clipboard, others retitle the window or hide text) and newlines that would make
one journal record look like two. What is printed keeps its words and loses its powers."""

from __future__ import annotations

import re

# ESC-introduced sequences (CSI, OSC/DCS/APC/PM strings up to BEL or ST, two-byte escapes),
# the single-byte C1 CSI/OSC, then any other C0/C1 control except tab, newline and CR.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x9d[^\x07\x1b]*(?:\x07|\x1b\\)?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\u2028\u2029\x85]")


def strip_controls(text: str) -> str:
    """Text without terminal escape sequences or control characters; newlines, tabs and
    carriage returns (progress bars) stay."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def one_line(text: str) -> str:
    """Like strip_controls, with every line break shown as a visible `\\n`: one record,
    one printed line."""
    return strip_controls(_LINE_BREAKS.sub(r"\\n", text)).replace("\t", " ")
