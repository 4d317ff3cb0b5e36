"""A phase's past runs, newest first: when each started, how long it took, how it ended,
who started it and which checks were overridden for it (with the reason). Enter opens
the selected run's log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from console.core.runs import manager
from console.ui.messages import Reading
from console.ui.pollers import Poller
from console.ui.render import fit, fmt_duration, fmt_time
from console.ui.screens.log_screen import LogScreen

MAX_RUNS = 200


@dataclass(frozen=True)
class RunRow:
    run_id: str
    log: str
    started_at: float | None
    duration_s: float | None
    state: str
    exit_code: int | None
    user: str
    overrides: tuple[str, ...]


@dataclass
class HistoryRead(Reading):
    rows: list[RunRow]


def read_history(project: Any, phase_id: str, limit: int = MAX_RUNS) -> list[RunRow]:
    """Newest first, at most `limit` runs; users and overrides from the journal."""
    runs = manager.list_runs(project.config.state_dir, phase_id)[-limit:]
    records = project.journal.read(phase=phase_id, events={"run_started", "override"})
    users: dict[str, str] = {}
    overrides: dict[str, list[str]] = {}
    pending: list[str] = []
    for rec in records:  # an override is journaled just before the start it applies to
        if rec.get("event") == "override":
            pending.append(f"{rec.get('check')}: {rec.get('reason')}")
        elif rec.get("event") == "run_started":
            rid = str(rec.get("run_id", ""))
            users[rid] = str(rec.get("user", "?"))
            overrides[rid], pending = pending, []
    rows = []
    for rd in reversed(runs):
        rs = manager.run_status(rd)
        rows.append(RunRow(rd.run_id, str(rd.output_log), rs.started_at, rs.duration_s, rs.state, rs.exit_code,
                           users.get(rd.run_id, "?"), tuple(overrides.get(rd.run_id, ()))))
    return rows


class HistoryScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q,h", "close", "Back", id="history.close", tooltip="Back to the phases"),
        Binding("enter,l", "open_log", "Open log", id="history.log", tooltip="Read the selected run's log"),
    ]

    rows: reactive[list[RunRow]] = reactive(list, init=False)

    def __init__(self, project: Any, phase_id: str, interval: float = 2.0) -> None:
        super().__init__()
        self.project = project
        self.phase_id = phase_id
        self.poller = Poller(self, f"history-{phase_id}", max(interval, 2.0),
                             lambda: HistoryRead(read_history(project, phase_id)))

    def compose(self) -> ComposeResult:
        yield Static(Content.assemble((f" {self.phase_id} ", "bold reverse"), " runs, newest first · ",
                                      ("enter: its log", "$text-muted")), id="history-header")
        yield OptionList(id="history-list")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self.poller.start()

    def on_unmount(self) -> None:
        self.poller.stop()

    def on_history_read(self, msg: HistoryRead) -> None:
        self.rows = msg.rows

    def watch_rows(self, rows: list[RunRow]) -> None:
        view = self.query_one(OptionList)
        keep = view.highlighted
        view.set_options([Option(self._line(r), id=r.run_id) for r in rows])
        if rows:
            view.highlighted = min(keep or 0, len(rows) - 1)

    def _line(self, r: RunRow) -> Content:
        end = r.state if r.exit_code is None else f"{r.state} (exit {r.exit_code})"
        style = "$error" if r.state in ("failed", "lost") else ("$success" if r.state == "succeeded" else "$text")
        parts: list[Any] = [(fmt_time(r.started_at), "$text-muted"), "  ", (fmt_duration(r.duration_s).rjust(7), ""),
                            "  ", (fit(end, 20), style), "  ", (fit(r.user, 10), "$accent"), "  ",
                            (r.run_id, "$text-muted")]
        if r.overrides:
            parts += ["\n    ", ("overridden: " + "; ".join(r.overrides), "$warning")]
        return Content.assemble(*parts)

    def action_open_log(self) -> None:
        view = self.query_one(OptionList)
        if view.highlighted is None or view.highlighted >= len(self.rows):
            return
        row = self.rows[view.highlighted]
        self.app.push_screen(LogScreen(f"{self.phase_id} {row.run_id}", lambda: row.log))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_open_log()

    def action_close(self) -> None:
        self.dismiss(None)
