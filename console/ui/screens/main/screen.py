"""The main screen: the phase checklist beside the live panels, and under them the
selected phase's detail (state, live stats, checks, log, and on wide terminals its
journal). This module is its layout and its keys; the rest of it is beside it in
`console.ui.screens.main`.

Every read runs in a poller's thread and returns data (`reads`): the project snapshot comes
from `console.core.lifecycle.snapshot` (the same one `eagle3 status --json` prints), and the
handlers on the UI loop (`feed`) only store it and redraw. What changed between two looks
(ended, stalled, lost runs) is `console.core.flow.watch`'s; starting a phase is
`console.core.flow.startflow`'s, with the console's dialogs in `console.ui.screens.startflow`."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Footer

from console.core.flow.startflow import StartRequest
from console.core.flow.watch import PreflightSchedule
from console.core.lifecycle.project import Project
from console.core.lifecycle.state import LIVE
from console.core.telemetry.samples import DiskReading, GpuReading, HostReading, ShmReading, Source
from console.ui.components.checks.checks_view import ChecksView
from console.ui.components.detail.charts import DetailCharts
from console.ui.components.detail.detail_header import DetailHeader
from console.ui.components.detail.live_bar import LiveBar
from console.ui.components.detail.stats_panel import StatsPanel
from console.ui.components.logs.journal_view import JournalView
from console.ui.components.logs.log_view import LogView
from console.ui.components.machine.disk_panel import DiskPanel
from console.ui.components.machine.gpu_panel import GpuPanel
from console.ui.components.machine.host_panel import HostPanel
from console.ui.components.machine.shm_panel import ShmPanel
from console.ui.components.phases.phase_list import PhaseList
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.checks_screen import ChecksScreen
from console.ui.screens.deadline_dialog import DeadlineDialog
from console.ui.screens.help_screen import HelpScreen
from console.ui.screens.history_screen import HistoryScreen
from console.ui.screens.journal_screen import JournalScreen
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.main.feed import MainFeed
from console.ui.screens.main.follow import CheckMemory, PhaseFollow
from console.ui.screens.main.reads import DETAIL_LOG_LINES, Intervals, MainReads, Sources
from console.ui.screens.main.work import PREFLIGHT_GROUP, MainWork
from console.ui.screens.startflow import StartFlow
from console.ui.worker_notices import WorkerNotices


class MainScreen(WorkerNotices, MainFeed):
    QUIET_WORKER_GROUPS = frozenset({PREFLIGHT_GROUP})  # the background pre-flight

    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide"), (160, "-very-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    BINDINGS = [
        Binding("r", "run", "Run", id="main.run", tooltip="Run the selected phase (pre-flight checks first)"),
        Binding("s", "stop", "Stop", id="main.stop", tooltip="Stop the selected phase (asks first)"),
        Binding("c", "check", "Check", id="main.check", tooltip="Run the selected phase's pre-flight checks"),
        Binding("v", "verify", "Verify", id="main.verify", tooltip="Run the selected phase's verify checks"),
        Binding("l", "log", "Log", id="main.log", tooltip="The selected phase's log, full screen"),
        Binding("q", "app.request_quit", "Quit", id="main.quit", tooltip="Quit; running phases keep running"),
        Binding("J", "journal", "Journal", id="main.journal", tooltip="Runs, checks, overrides and stops"),
        Binding("question_mark", "help", "Help", id="main.help", tooltip="Keys and state glyphs"),
        Binding("h", "history", "History", show=False, id="main.history",
                tooltip="The selected phase's past runs; open any run's log"),
        Binding("e", "expand_checks", "Checks", show=False, id="main.expand",
                tooltip="Every check of the phase full screen: verdict, message, evidence"),
        Binding("t", "app.next_theme", "Theme", show=False, id="main.theme", tooltip="Switch to the next theme"),
        Binding("n", "next_live", "Next live", show=False, id="main.next-live",
                tooltip="Select the next running phase: its log, stats and checks"),
        Binding("d", "deadline", "Deadline", show=False, id="main.deadline",
                tooltip="Set or clear the deadline: running phases then get the stop s sends"),
    ]

    def __init__(self, project: Project, *, gpu_source: Source[GpuReading] | None,
                 disk_source: Source[DiskReading] | None, shm_source: Source[ShmReading] | None,
                 host_source: Source[HostReading] | None, clock: Callable[[], float] = time.time,
                 intervals: Intervals | None = None, read_only: bool = False) -> None:
        super().__init__()
        self.project = project
        self.read_only = read_only
        self.clock = clock
        self.iv = intervals or Intervals()
        self.follow = PhaseFollow()
        self.memory = CheckMemory()
        self.flow = StartFlow(self, project)
        self.preflights = PreflightSchedule(self.iv.preflight)
        self.reads = MainReads(project, Sources(gpu_source, disk_source, shm_source, host_source),
                               self.follow, self.memory, lambda: self.selected, clock)
        self.pollers = self.reads.pollers(self, self.iv)
        self.work = MainWork(self, project, self.pollers["status"].poke)

    # -- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="top"):
            with Vertical(id="left"):
                yield PhaseList(clock=self.clock, id="phases")
                with Vertical(id="storage"):
                    yield DiskPanel(id="disk")
                    yield ShmPanel(id="shm")
                    yield HostPanel(id="host")
            with Vertical(id="live"):
                yield GpuPanel(id="gpu")
        with Vertical(id="detail"):
            yield LiveBar(id="live-bar")
            yield DetailHeader(id="detail-header")
            yield StatsPanel(id="stats")
            yield DetailCharts(str(self.project.config.root), interval=self.iv.journal, id="charts")
            with Horizontal(id="detail-body"):
                yield ChecksView(id="checks")
                yield LogView(max_lines=DETAIL_LOG_LINES, titled=True, wrap=True, id="log")
                yield JournalView(id="journal")
        yield Footer()

    def on_mount(self) -> None:
        self.title_phases()
        self.query_one("#storage").border_title = "disk · shm · host"
        self.query_one("#journal").border_title = "journal"
        self.query_one("#stats").display = False
        self.query_one(LiveBar).display = False
        self.query_one(PhaseList).focus()
        self._layout_flags()
        # After the first layout: a read that lands before the widgets have a size leaves the
        # phase list measured empty.
        self.call_after_refresh(self._start_pollers)

    def _compositor_refresh(self) -> None:
        """Under a dialog, Textual 8 marks this screen for a whole repaint each time it draws
        what changed beneath, and repaints it whole at the next message it handles: every
        reading then redrew the whole screen and the dialog's tinted copy of it (a dialog over
        a quiet console cost a third of a core in tests). What changed is already drawn, and
        the screen repaints whole when the dialog closes (Textual's screen resume)."""
        super()._compositor_refresh()
        if self.app.screen is not self:
            self._repaint_required = False

    def _start_pollers(self) -> None:
        for poller in self.pollers.values():
            poller.start()

    def on_resize(self) -> None:
        self._layout_flags()
        self.title_phases()

    def _layout_flags(self) -> None:
        """What the pollers may read without touching the DOM, and the compact stats."""
        self.reads.journal_visible = self.size.width >= 160
        self.query_one(StatsPanel).set_compact(self.size.height < 36)

    def on_unmount(self) -> None:
        for poller in self.pollers.values():
            poller.stop()

    # -- actions ------------------------------------------------------------------------------
    def _acting(self, verb: str) -> bool:
        """False (and a line saying why) in a read-only view: run, stop, check and verify
        are decisions the journal records, so a browser watching must not take them."""
        if self.read_only:
            self.notify(f"read-only view: {verb} is off here (serve with --serve-actions to allow it)",
                        severity="warning", timeout=6)
        return not self.read_only

    def _phase_or_warn(self) -> str | None:
        """The phase under the list's cursor, read from the list: keys typed ahead (a burst
        over a slow SSH link: `j j r`) reach the actions before the list's highlight message
        reaches this screen, and `r` must not start the phase the cursor just left."""
        current = self.query_one(PhaseList).selected_id
        if current is not None and current != self.selected:
            self.selected = current
        if self.selected is None:
            self.notify("no phase selected", severity="warning")
        return self.selected

    def action_check(self) -> None:
        if not self._acting("check"):
            return
        if (pid := self._phase_or_warn()) is not None:
            self.notify(f"checking {pid}…", timeout=2)
            self.work.checks(pid, "check")

    def action_verify(self) -> None:
        if not self._acting("verify"):
            return
        if (pid := self._phase_or_warn()) is not None:
            self.notify(f"verifying {pid}…", timeout=2)
            self.work.checks(pid, "verify")

    def action_expand_checks(self) -> None:
        shown = self.query_one(ChecksView).shown
        self.app.push_screen(ChecksScreen(self.selected or "", shown.title, shown.results, shown.hint))

    def action_run(self) -> None:
        if not self._acting("run"):
            return
        if (pid := self._phase_or_warn()) is not None:
            self.flow.begin(pid)

    def start_phase(self, phase_id: str, overrides: dict[str, str], confirmed: bool) -> None:
        """Start with these answers, asking nothing (its checks still run)."""
        if self._acting("run"):
            self.flow.start(StartRequest(phase_id, overrides, confirmed))

    def action_stop(self) -> None:
        if not self._acting("stop"):
            return
        pid = self._phase_or_warn()
        if pid is None:
            return
        st = self.follow.by_id.get(pid)
        if st is None or st.state not in LIVE or st.run is None:
            self.notify(f"{pid} is not running", severity="warning")
            return
        run_id = st.run.run_id

        def answer(yes: bool | None) -> None:
            if yes:
                self.work.stop(pid, run_id)

        self.app.push_screen(AskDialog(
            f"stop {pid}?",
            Content.assemble("Stop ", (pid, "bold"), f" (run {run_id}", (f", pid {st.pid}" if st.pid else ""),
                             ")? Its process group gets SIGTERM, then SIGKILL after a grace period. "
                             "The stop is journaled."),
            yes="Stop", danger=True), answer)

    def action_next_live(self) -> None:
        pick = self.follow.next_live(self.selected)
        if pick is None:
            self.notify("no phase is running", severity="warning", timeout=4)
            return
        self.query_one(PhaseList).select_id(pick)
        self.selected = pick

    def action_deadline(self) -> None:
        if self._acting("a deadline"):
            self.app.push_screen(DeadlineDialog(self.follow.deadline, self.clock()),
                                 lambda answer: None if answer is None else self.work.deadline(answer))

    def action_log(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.app.push_screen(LogScreen(pid, lambda: self.follow.log_path(pid), interval=self.iv.log))

    def action_history(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.app.push_screen(HistoryScreen(self.project, pid, interval=self.iv.log))

    def action_journal(self) -> None:
        self.app.push_screen(JournalScreen(self.project, self.selected, interval=self.iv.journal))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())
