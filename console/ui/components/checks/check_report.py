"""Every check of a phase as an operator reads it on a page: its name and verdict, its
message, then its evidence one fact a row (a key, then its value wrapped under itself), never
raw JSON a few words a row. What `e` opens full screen (`screens/checks_screen.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from textual.content import Content
from textual.widget import Widget

from console.core.checks.result import CheckResult
from console.ui.components.checks.checks_view import ordered
from console.ui.render import CHECK_STYLES, check_glyph, fmt_time, looks_like_epoch

INDENT = 3  # a check's message and evidence sit under its name
KEY_MAX = 18  # the evidence keys' column, at most
VERDICTS = {"pass": "passes", "warn": "warns", "fail": "fails"}


def _wrap(text: str, width: int) -> list[str]:
    """`text` in rows of `width`, broken at spaces where it can (a path has none: it breaks
    where the row ends)."""
    rows: list[str] = []
    for para in text.split("\n") or [""]:
        lines = Content(para).wrap(max(8, width))
        rows += [ln.plain.rstrip() for ln in lines] or [""]
    return rows


def _scalar(key: str, value: Any) -> str:
    if looks_like_epoch(key, value):
        return fmt_time(value, seconds=True)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def evidence_rows(key: str, value: Any) -> list[tuple[str, str]]:
    """(key, text) rows for one piece of evidence: an argv as the words it runs (no shell
    quoting), the lines of an output tail each on its own row, a mapping's keys as rows of
    their own, other lists joined by commas."""
    if isinstance(value, dict):
        rows: list[tuple[str, str]] = []
        for k, v in list(value.items())[:50]:
            inner = v if not isinstance(v, (dict, list)) else json.dumps(v, default=str)
            rows.append((f"{key}.{k}", _scalar(k, inner)))
        return rows or [(key, "(none)")]
    if isinstance(value, (list, tuple)):
        if key == "argv" or key.endswith("_argv"):
            return [(key, " ".join(str(v) for v in value))]
        if all(isinstance(v, str) for v in value) and any(len(v) > 40 for v in value) or key.endswith("tail"):
            return [(key if i == 0 else "", str(v)) for i, v in enumerate(value[:50])] or [(key, "(none)")]
        return [(key, ", ".join(_scalar(key, v) for v in value[:50]) or "(none)")]
    return [(key, _scalar(key, value))]


def check_lines(r: CheckResult, width: int) -> list[Content]:
    """One check: `✗ name  fails (error)`, its message, then its evidence."""
    severity = "warning" if r.severity == "warning" else "error"
    verdict = "overridden" if r.overridden else VERDICTS.get(r.status, r.status)
    head = Content.assemble(check_glyph(r.status, r.overridden), " ", (r.name, "bold"), "  ",
                            (verdict, "$warning" if r.overridden else CHECK_STYLES.get(r.status, "")),
                            (f" ({severity})", "$text-muted"))
    out = [head]
    room = max(8, width - INDENT)
    pad = " " * INDENT
    out += [Content(pad + row) for row in _wrap(r.message, room)] if r.message else []
    if r.overridden:
        out += [Content.styled(pad + row, "$warning") for row in _wrap(f"overridden: {r.reason}", room)]
    rows = [row for k, v in r.evidence.items() for row in evidence_rows(str(k), v)]
    if rows:
        key_w = min(KEY_MAX, max(len(k) for k, _ in rows))
        value_w = max(8, room - key_w - 2)
        for key, text in rows:
            for i, piece in enumerate(_wrap(text, value_w)):
                label = (key if i == 0 else "")[:key_w].ljust(key_w)
                out.append(Content.assemble(pad, (label, "$text-muted"), "  ", piece))
    return out


def report_lines(results: Sequence[CheckResult], width: int) -> list[Content]:
    """Every check, failing first, a blank row between two."""
    out: list[Content] = []
    for i, r in enumerate(ordered(results)):
        if i:
            out.append(Content(""))
        out += check_lines(r, width)
    return out


def counts(results: Sequence[CheckResult]) -> str:
    """`2 fail · 1 warn · 5 pass` (an empty kind left out)."""
    n = {s: sum(1 for r in results if r.status == s) for s in ("fail", "warn", "pass")}
    return " · ".join(f"{k} {s}" for s, k in n.items() if k) or "no checks"


class CheckReport(Widget):
    """The report at the width it is drawn at; its height is its rows."""

    DEFAULT_CSS = "CheckReport { height: auto; padding: 0 1; }"

    def __init__(self, results: Sequence[CheckResult], **kw: Any) -> None:
        super().__init__(**kw)
        self.results = tuple(results)

    def _lines(self, width: int) -> list[Content]:
        return report_lines(self.results, width) or [Content.styled("no checks configured", "$text-muted")]

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(self._lines(width))

    def render(self) -> Content:
        return Content("\n").join(self._lines(self.content_region.width or self.size.width or 80))
