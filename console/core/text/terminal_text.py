"""Text from files a phase or an operator wrote, made safe to print on a terminal.

A phase's log, a check message or an override reason may hold escape sequences (OSC 52
writes the clipboard, others retitle the window or hide text) and newlines that would make
one journal record look like two. Unicode format characters (category Cf: the bidi
overrides and isolates U+202A-202E and U+2066-2069, invisible separators, tags) reorder or
hide what the operator reads, and one cut by truncation stays open over the rest of the row;
they go too, except ZWJ and ZWNJ, which some scripts and emoji need to read right.
What is printed keeps its words and loses its powers."""

from __future__ import annotations

import re
import unicodedata

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
# Every block that holds a Cf character; the category itself is asked per match, so the
# scan stays one regex and the verdict follows the Unicode tables of this Python.
_FORMAT_BLOCKS = re.compile(
    "[\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001345f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
_KEPT = {"\u200c", "\u200d"}  # ZWNJ, ZWJ
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\u2028\u2029\x85]")


def _format_or_kept(m: re.Match[str]) -> str:
    c = m.group()
    return c if c in _KEPT or unicodedata.category(c) != "Cf" else ""


def strip_format(text: str) -> str:
    """Text without Unicode format characters (category Cf) other than ZWJ and ZWNJ."""
    return _FORMAT_BLOCKS.sub(_format_or_kept, text)


def has_format(text: str) -> bool:
    """Whether strip_format might change `text` (a cheap test for the common clean case)."""
    return _FORMAT_BLOCKS.search(text) is not None


def strip_controls(text: str) -> str:
    """Text without terminal escape sequences, control characters or format characters;
    newlines, tabs and carriage returns (progress bars) stay."""
    return strip_format(_CONTROLS.sub("", _ESCAPES.sub("", text)))


def one_line(text: str) -> str:
    """Like strip_controls, with every line break shown as a visible `\\n`: one record,
    one printed line."""
    return strip_controls(_LINE_BREAKS.sub(r"\\n", text)).replace("\t", " ")
