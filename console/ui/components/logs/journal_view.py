"""Journal records as one line each: when, what, which phase, and the detail that matters
(exit code, override reason, failing checks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from console.ui.render import fmt_time

_EVENT_STYLES = {
    "run_started": "$primary",
    "run_ended": "$success",
    "override": "$warning",
    "stop": "$warning",
    "confirm": "$warning",
    "checks": "$text",
    "verify": "$text",
}


def describe(rec: dict[str, Any]) -> str:
    ev = rec.get("event", "")
    if ev == "run_ended":
        bits = [f"exit {rec.get('exit_code', rec.get('code', '?'))}"]
        if rec.get("state"):
            bits.insert(0, str(rec["state"]))
        return " ".join(bits)
    if ev == "override":
        return f"{rec.get('check')}: {rec.get('reason')}"
    if ev in ("checks", "verify"):
        results = rec.get("results") or []
        bad = [r.get("name") for r in results if isinstance(r, dict) and r.get("status") == "fail"]
        return ("failing: " + ", ".join(map(str, bad))) if bad else f"{len(results)} passed"
    if ev == "run_started":
        return str(rec.get("run_id", ""))
    for key in ("reason", "summary", "message", "text"):
        if rec.get(key):
            return str(rec[key]).splitlines()[0]
    return ""


def render_records(records: Sequence[dict[str, Any]], show_phase: bool = True) -> Content:
    rows = []
    for rec in records:
        t = rec.get("t")
        when = fmt_time(t) if isinstance(t, (int, float)) else "?"
        ev = str(rec.get("event", "?"))
        style = _EVENT_STYLES.get(ev, "$text")
        if ev in ("checks", "verify", "run_ended") and "fail" in describe(rec) or (
                ev == "run_ended" and rec.get("exit_code") not in (0, None)):
            style = "$error"
        parts: list[Any] = [(when, "$text-muted"), " ", (ev.ljust(11), style), " "]
        if show_phase:
            parts += [(str(rec.get("phase") or "-").ljust(10), "$accent"), " "]
        parts.append(describe(rec))
        if rec.get("user"):
            parts.append((f"  ({rec['user']})", "$text-muted"))
        rows.append(Content.assemble(*parts))
    if not rows:
        return Content.styled("no journal entries yet", "$text-muted")
    return Content("\n").join(rows)


class JournalView(VerticalScroll):
    """The records shown, newest at the end. The same records read again change nothing:
    an operator who scrolled up to read stays where they are until a new record comes."""

    DEFAULT_CSS = "JournalView { height: 1fr; } JournalView > Static { width: 1fr; }"

    # (records, whether each row names its phase)
    shown: reactive[tuple[tuple[dict[str, Any], ...], bool] | None] = reactive(None, init=False)

    def compose(self) -> ComposeResult:
        yield Static(Content.styled("reading journal…", "$text-muted"), id="journal-body")

    def show(self, records: Sequence[dict[str, Any]], show_phase: bool = True) -> None:
        self.shown = (tuple(records), show_phase)

    def watch_shown(self, shown: tuple[tuple[dict[str, Any], ...], bool]) -> None:
        records, show_phase = shown
        self.query_one("#journal-body", Static).update(render_records(records, show_phase))
        self.scroll_end(animate=False)
