"""The main screen's UI-loop side: what its pollers and workers post comes in here, is kept
(`follow`), and is drawn (the phase list, the panels, the detail). The handlers only store
and draw; every read was made off the loop (`reads`)."""

from __future__ import annotations

from collections.abc import Callable

from textual.reactive import var
from textual.screen import Screen
from textual.widgets import OptionList

from console.core.checks.result import CheckResult
from console.core.flow.watch import PreflightSchedule
from console.core.lifecycle.project import Project
from console.core.lifecycle.stall import StallAlert
from console.core.lifecycle.state import PhaseStatus, State
from console.ui.components.checks.checks_view import ChecksView
from console.ui.components.detail.charts import DetailCharts
from console.ui.components.detail.detail_header import NO_PHASE, DetailHeader, heading
from console.ui.components.detail.live_bar import LiveBar, live_line
from console.ui.components.detail.stats_panel import StatsPanel, is_empty
from console.ui.components.logs.journal_view import JournalView
from console.ui.components.logs.log_view import LogView
from console.ui.components.machine.disk_panel import DiskPanel
from console.ui.components.machine.gpu_panel import GpuPanel
from console.ui.components.machine.host_panel import HostPanel
from console.ui.components.machine.shm_panel import ShmPanel
from console.ui.components.phases.phase_list import PhaseList
from console.ui.components.phases.phases_title import phases_title
from console.ui.messages import (
    ActionFailed,
    ChecksDone,
    DiskUpdated,
    GpuUpdated,
    HostUpdated,
    JournalRead,
    LogLines,
    ShmUpdated,
    SnapshotUpdated,
    StartChecked,
    StartLaunched,
    StartOutcome,
    StartsChanged,
)
from console.ui.pollers import Poller
from console.ui.screens.main.follow import CheckMemory, PhaseFollow
from console.ui.screens.main.reads import Intervals
from console.ui.screens.main.work import MainWork
from console.ui.screens.startflow import StartFlow


class MainFeed(Screen[None]):
    """The handlers of the main screen (`screen.MainScreen` adds its layout and keys)."""

    selected: var[str | None] = var(None, init=False)  # the phase the detail shows

    project: Project
    clock: Callable[[], float]
    iv: Intervals
    follow: PhaseFollow
    memory: CheckMemory
    pollers: dict[str, Poller]
    preflights: PreflightSchedule
    flow: StartFlow
    work: MainWork

    def on_snapshot_updated(self, msg: SnapshotUpdated) -> None:
        follow = self.follow
        first = follow.snapshot is None
        look = msg.look
        follow.take(look)
        self.query_one(LiveBar).view = live_line(look.snapshot, look.deadline, self.clock())
        if look.reread:
            self._config_reread()
        if look.config_error:
            self.notify(f"{look.config_error}. The console keeps the values it had and starts "
                        f"nothing until the file loads again.", title="config", severity="error", timeout=30)
        for pid, results in look.attach_checks.items():
            self.remember_checks(pid, "check", results, redraw=False)
        plist = self.query_one(PhaseList)
        plist.show(follow.statuses, follow.stalled, self.flow.starting, follow.warnings)
        if first:
            if (pick := follow.worth_opening()) is not None:
                plist.select_id(pick)
                self.selected = pick
        elif self.selected is None and plist.selected_id is not None:
            self.selected = plist.selected_id
        for st in look.ended:
            self._phase_ended(st)
        for alert in look.alerts:
            self._stalled(alert)
        self.show_detail()
        for pid in self.preflights.due(follow.statuses):  # not journaled: only operator checks are decisions
            self.work.preflight(pid)

    def _config_reread(self) -> None:
        """The config's files changed and the project took them: check results judged under
        the old values are dropped (the pre-flight runs again), the titles say the values
        now in effect."""
        self.memory.forget()
        self.preflights = PreflightSchedule(self.iv.preflight)
        self.title_phases()
        self.notify(f"{self.project.config.path.name} or its saved overrides changed: the console now uses them",
                    title="config", timeout=6)

    def title_phases(self) -> None:
        cfg = self.project.config
        plist = self.query_one("#phases")
        width = plist.size.width - 4 if plist.size.width > 8 else 60  # the border's corners and padding
        plist.border_title = phases_title(cfg.name, cfg.saved_overrides, width, cfg.vars.get("target"))

    def _phase_ended(self, st: PhaseStatus) -> None:
        self.app.bell()
        good = st.state == State.DONE
        text = f"{st.phase.id} {st.state}"
        if st.reason:
            text += f": {st.reason}"
        self.notify(text, title="phase ended", severity="information" if good else "error",
                    timeout=10 if good else 30)

    def _stalled(self, alert: StallAlert) -> None:
        self.app.bell()
        self.notify(alert.summary, title="⚠ stalled", severity="warning", timeout=30)

    def on_gpu_updated(self, msg: GpuUpdated) -> None:
        self.query_one(GpuPanel).show(msg.reading, msg.owners)

    def on_disk_updated(self, msg: DiskUpdated) -> None:
        self.query_one(DiskPanel).show(msg.reading, msg.forecasts, msg.needs)

    def on_shm_updated(self, msg: ShmUpdated) -> None:
        self.query_one(ShmPanel).show(msg.reading)

    def on_host_updated(self, msg: HostUpdated) -> None:
        self.query_one(HostPanel).show(msg.reading)

    def on_log_lines(self, msg: LogLines) -> None:
        view = self.query_one("#log", LogView)
        if msg.reset:
            view.clear()
            view.set_source(msg.path)
        view.append(msg.lines, msg.partial)

    def on_journal_read(self, msg: JournalRead) -> None:
        if msg.phase_id == self.selected:
            self.query_one("#journal", JournalView).show(msg.records, show_phase=False)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None:
            self.selected = event.option.id

    def watch_selected(self) -> None:
        """Another phase picked (in the list, on attach, from the palette): its detail now,
        its log and journal at the pollers' next look, which this brings forward."""
        self.show_detail()
        self.pollers["log"].poke()
        self.pollers["journal"].poke()

    def show_detail(self) -> None:
        st = self.follow.by_id.get(self.selected or "")
        header = self.query_one(DetailHeader)
        if st is None:
            header.view = NO_PHASE
            return
        pid = st.phase.id
        header.view = heading(st, stalled=pid in self.follow.stalled, first_unit=pid in self.follow.first_unit,
                              now=self.clock(), wide=self.size.width >= 100)
        snap = self.follow.stats.get(pid)
        self.query_one(StatsPanel).show(None if is_empty(snap) else snap)
        self.query_one(DetailCharts).show(st, snap)
        self._show_checks(st)

    def _show_checks(self, st: PhaseStatus) -> None:
        view = self.query_one(ChecksView)
        shown = self.memory.shown.get(st.phase.id)
        if shown is not None:
            kind, results = shown
            view.show(results, "verify" if kind == "verify" else "pre-flight checks")
        elif st.verify is not None:
            view.show(st.verify, "verify (last run)")
        elif st.checks is not None:
            view.show(st.checks, "pre-flight checks")
        else:
            n = len(st.phase.checks)
            view.show(None, "pre-flight checks",
                      hint=f"{n} check(s), not run yet: press c" if n else "no checks configured; c runs needs")

    def remember_checks(self, phase_id: str, kind: str, results: list[CheckResult], redraw: bool = True) -> None:
        self.memory.remember(phase_id, kind, results)
        if redraw:
            self.show_detail()

    def on_checks_done(self, msg: ChecksDone) -> None:
        self.remember_checks(msg.phase_id, msg.kind, msg.results, redraw=False)
        if msg.kind != "preflight":  # the background pre-flight updates quietly
            bad = [r for r in msg.results if r.status == "fail"]
            warn = [r for r in msg.results if r.status == "warn"]
            what = "checks" if msg.kind == "check" else "verify"
            if bad:
                self.notify(f"{msg.phase_id}: {what} failing: " + ", ".join(r.name for r in bad), severity="error")
            else:
                self.notify(f"{msg.phase_id}: {what} passed ({len(msg.results)})"
                            + (f", {len(warn)} warning(s)" if warn else ""))
        self.pollers["status"].poke()
        self.show_detail()

    def on_action_failed(self, msg: ActionFailed) -> None:
        self.notify(msg.text, severity="error", timeout=15)

    def on_starts_changed(self, _msg: StartsChanged) -> None:
        self.query_one(PhaseList).show(self.follow.statuses, self.follow.stalled, self.flow.starting,
                                       self.follow.warnings)

    def on_start_checked(self, msg: StartChecked) -> None:
        self.remember_checks(msg.phase_id, "check", msg.results)

    def on_start_launched(self, _msg: StartLaunched) -> None:
        self.pollers["status"].poke()
        self.pollers["log"].poke()

    def on_start_outcome(self, msg: StartOutcome) -> None:
        self.flow.outcome(msg)
