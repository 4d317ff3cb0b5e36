"""The selected phase's latest pre-flight (or verify) results with their evidence."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from console.core.checks.result import CheckResult
from console.ui.render import check_glyph


def _evidence(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)[:200]
    return str(value)[:200]


def render_results(results: Sequence[CheckResult], evidence_lines: int = 4) -> Content:
    rows: list[Content] = []
    for r in results:
        msg = r.message.splitlines()[0] if r.message else ""
        sev = "" if r.severity == "error" else " (warning)"
        rows.append(Content.assemble(check_glyph(r.status, r.overridden), " ", (r.name, "bold"),
                                     (sev, "$text-muted"), " ", msg))
        if r.overridden:
            rows.append(Content.styled(f"    overridden: {r.reason}", "$warning"))
        for k, v in list(r.evidence.items())[:evidence_lines]:
            rows.append(Content.styled(f"    {k}: {_evidence(v)}", "$text-muted"))
    return Content("\n").join(rows)


class ChecksView(VerticalScroll):
    DEFAULT_CSS = "ChecksView { height: 1fr; } ChecksView > Static { width: 1fr; }"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.results: list[CheckResult] | None = None
        self.title = "checks"

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static(Content.styled("not checked yet: press c", "$text-muted"), id="checks-body")

    def show(self, results: list[CheckResult] | None, title: str, hint: str = "not checked yet: press c") -> None:
        key = (title, hint, None if results is None else
               tuple((r.name, r.status, r.message, r.overridden, str(r.evidence)) for r in results))
        if key == getattr(self, "_key", None):
            return
        self._key = key
        self.results = results
        self.border_title = title
        body = self.query_one("#checks-body", Static)
        if results is None:
            body.update(Content.styled(hint, "$text-muted"))
        elif not results:
            body.update(Content.styled("no checks configured", "$text-muted"))
        else:
            body.update(render_results(results))
