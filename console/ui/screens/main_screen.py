"""The main screen: the phase checklist beside the live panels, and under them the
selected phase's detail (state, live stats, checks, log, and on wide terminals its
journal).

Every read runs in a poller's thread and returns data: the project snapshot comes from
`console.core.lifecycle.snapshot` (the same one `eagle3 status --json` prints), and the handlers on
the UI loop only store it and redraw. What changed between two looks (ended, stalled, lost
runs) is `console.core.flow.watch`'s; starting a phase is `console.core.flow.startflow`'s, with the
console's dialogs in `console.ui.screens.startflow`.

The thread workers an operator's key starts (checks, verify, stop) do not catch: a failure
reaches the operator as one notice named for the worker (`console.ui.worker_notices`). The
background pre-flight fails silently; the operator's own check shows the error."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer, OptionList

from console.core.checks.result import CheckResult
from console.core.lifecycle.livestats import LiveSnapshot
from console.core.lifecycle.project import Project
from console.core.lifecycle.snapshot import Snapshot
from console.core.lifecycle.stall import StallAlert
from console.core.flow.startflow import StartRequest
from console.core.lifecycle.state import LIVE, PhaseStatus, State
from console.core.runs.deadline import Deadline
from console.core.telemetry.history import DiskForecast
from console.core.flow.watch import Look, PhaseWatch, PreflightSchedule, disk_outlook, gpu_owners
from console.ui.components.charts import DetailCharts
from console.ui.components.checks_view import ChecksView
from console.ui.components.detail_header import NO_PHASE, DetailHeader, heading
from console.ui.components.disk_panel import DiskPanel
from console.ui.components.gpu_panel import GpuPanel
from console.ui.components.host_panel import HostPanel
from console.ui.components.journal_view import JournalView
from console.ui.components.live_bar import LiveBar, live_line
from console.ui.components.log_view import LogView
from console.ui.components.phase_list import PhaseList
from console.ui.components.phases_title import phases_title
from console.ui.components.shm_panel import ShmPanel
from console.ui.components.stats_panel import StatsPanel, is_empty
from console.ui.logfeed import LogFeed
from console.ui.messages import (
    ChecksDone,
    DiskUpdated,
    GpuUpdated,
    HostUpdated,
    JournalRead,
    LogLines,
    ShmUpdated,
)
from console.ui.pollers import Poller
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.checks_screen import ChecksScreen
from console.ui.screens.deadline_dialog import DeadlineDialog, DeadlineTyped
from console.ui.screens.help_screen import HelpScreen
from console.ui.screens.history_screen import HistoryScreen
from console.ui.screens.journal_screen import JournalScreen
from console.ui.screens.log_screen import LogScreen
from console.ui.screens.startflow import StartChecked, StartFlow, StartLaunched, StartOutcome, StartsChanged
from console.ui.worker_notices import WorkerNotices

DETAIL_LOG_LINES = 1000


@dataclass
class SnapshotUpdated(Message):
    """A look at the project, carried from the status poller to the UI loop."""

    look: Look


@dataclass
class ActionFailed(Message):
    text: str


class Intervals:
    """Poll periods in seconds (tests shorten them). GPUs every 2 s, as nvitop does; disks
    every 5 s (their rate is a minute's median); the log 4 times a second, since that is
    where an operator looks while a phase runs (a read with nothing new costs a stat)."""

    def __init__(self, status: float = 1.0, gpu: float = 2.0, disk: float = 5.0, shm: float = 5.0,
                 host: float = 3.0, log: float = 0.25, journal: float = 2.0, preflight: float = 60.0) -> None:
        self.status, self.gpu, self.disk, self.shm = status, gpu, disk, shm
        self.host, self.log, self.journal = host, log, journal
        self.preflight = preflight  # re-check ready/blocked phases this often; 0 turns it off


class MainScreen(WorkerNotices, Screen[None]):
    QUIET_WORKER_GROUPS = frozenset({"preflight"})  # the background pre-flight

    selected: var[str | None] = var(None, init=False)  # the phase the detail shows

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

    def __init__(self, project: Project, *, gpu_source: Any, disk_source: Any, shm_source: Any,
                 host_source: Any, clock: Callable[[], float] = time.time,
                 intervals: Intervals | None = None, read_only: bool = False) -> None:
        super().__init__()
        self.project = project
        self.read_only = read_only
        self.sources = {"gpu": gpu_source, "disk": disk_source, "shm": shm_source, "host": host_source}
        self.clock = clock
        self.iv = intervals or Intervals()
        self.watch = PhaseWatch(project, clock=clock)
        self.flow = StartFlow(self, project)
        self.snapshot: Snapshot | None = None
        self.deadline: Deadline | None = None  # the project's, as the last look read it
        self.snapshots_handled = 0
        self.preflights = PreflightSchedule(self.iv.preflight)
        self.statuses: list[PhaseStatus] = []
        self.by_id: dict[str, PhaseStatus] = {}
        self.stats: dict[str, LiveSnapshot] = {}
        self.stalled: set[str] = set()
        self.first_unit: set[str] = set()  # silent past stall_after, busy on their first unit
        self.checks: dict[str, list[CheckResult]] = {}  # replaced, never mutated: pollers read it
        self.shown: dict[str, tuple[str, list[CheckResult]]] = {}
        self.ended: list[tuple[str, str]] = []
        self.alerts: list[StallAlert] = []
        self._sessions: dict[int, str] = {}
        self._journal_visible = False
        self._forecast = DiskForecast()
        self._journal_seen: tuple[object, ...] = ()
        self.log_feed = LogFeed("main", self._selected_log_path, DETAIL_LOG_LINES, paced=True)
        self.pollers: dict[str, Poller] = {
            "status": Poller(self, "status", self.iv.status, self._read_snapshot),
            "log": Poller(self, "log", self.iv.log, self.log_feed.read),
            "journal": Poller(self, "journal", self.iv.journal, self._read_journal),
        }
        for name, read in (("gpu", self._read_gpu), ("disk", self._read_disk),
                           ("shm", self._read_shm), ("host", self._read_host)):
            if self.sources[name] is not None:
                self.pollers[name] = Poller(self, name, getattr(self.iv, name), read)

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
        self._title_phases()
        self.query_one("#storage").border_title = "disk · shm · host"
        self.query_one("#journal").border_title = "journal"
        self.query_one("#stats").display = False
        self.query_one(LiveBar).display = False
        self.query_one(PhaseList).focus()
        self._layout_flags()
        # After the first layout: a read that lands before the widgets have a size leaves the
        # phase list measured empty.
        self.call_after_refresh(self._start_pollers)

    def _start_pollers(self) -> None:
        for poller in self.pollers.values():
            poller.start()

    def on_resize(self) -> None:
        self._layout_flags()
        self._title_phases()

    def _title_phases(self) -> None:
        cfg = self.project.config
        plist = self.query_one("#phases")
        width = plist.size.width - 4 if plist.size.width > 8 else 60  # the border's corners and padding
        plist.border_title = phases_title(cfg.name, cfg.saved_overrides, width, cfg.vars.get("target"))

    def _layout_flags(self) -> None:
        """What the pollers may read without touching the DOM, and the compact stats."""
        self._journal_visible = self.size.width >= 160
        self.query_one(StatsPanel).set_compact(self.size.height < 36)

    def on_unmount(self) -> None:
        for poller in self.pollers.values():
            poller.stop()

    # -- reads (poller threads: data in, data out, no DOM) ----------------------------------
    def _read_snapshot(self) -> SnapshotUpdated:
        return SnapshotUpdated(self.watch.look(self.checks))

    def _read_gpu(self) -> GpuUpdated:
        reading = self.sources["gpu"].read()
        return GpuUpdated(reading, gpu_owners(reading, self._sessions))

    def _read_disk(self) -> DiskUpdated:
        reading = self.sources["disk"].read()
        forecasts = disk_outlook(self._forecast, reading)
        return DiskUpdated(reading, forecasts, self.watch.space_needs(self.snapshot, self._forecast))

    def _read_shm(self) -> ShmUpdated:
        return ShmUpdated(self.sources["shm"].read())

    def _read_host(self) -> HostUpdated:
        return HostUpdated(self.sources["host"].read())

    def _read_journal(self) -> JournalRead | None:
        selected = self.selected
        if not self._journal_visible or selected is None:
            return None
        try:
            st = self.project.journal.path.stat()
            seen: tuple[object, ...] = (selected, st.st_size, st.st_mtime_ns)
        except OSError:
            seen = (selected, None)
        if seen == self._journal_seen:
            return None
        self._journal_seen = seen
        return JournalRead(selected, self.project.journal.read(phase=selected, limit=50))

    def _selected_log_path(self) -> str | None:
        return self.log_path_of(self.selected or "")()

    def log_path_of(self, phase_id: str) -> Callable[[], str | None]:
        def path() -> str | None:
            st = self.by_id.get(phase_id)
            return str(st.run.output_log) if st is not None and st.run is not None else None
        return path

    # -- updates (UI loop) ------------------------------------------------------------------
    def on_snapshot_updated(self, msg: SnapshotUpdated) -> None:
        self.snapshots_handled += 1
        first = self.snapshot is None
        look = msg.look
        snap = self.snapshot = look.snapshot
        self.statuses = snap.statuses
        self.by_id = {s.phase.id: s for s in self.statuses}
        self.stats = snap.stats
        self.deadline = look.deadline
        self.query_one(LiveBar).view = live_line(snap, look.deadline, self.clock())
        self.stalled = {pv.id for pv in snap.phases if pv.stalled}
        self.first_unit = {pv.id for pv in snap.phases if pv.awaiting_first_unit}
        self._sessions = snap.sessions()
        if look.reread:
            self._config_reread()
        if look.config_error:
            self.notify(f"{look.config_error}. The console keeps the values it had and starts "
                        f"nothing until the file loads again.", title="config", severity="error", timeout=30)
        for pid, results in look.attach_checks.items():
            self.remember_checks(pid, "check", results, redraw=False)
        plist = self.query_one(PhaseList)
        plist.show(self.statuses, self.stalled, self.flow.starting)
        if first:
            self._select_on_attach(plist)
        elif self.selected is None and plist.selected_id is not None:
            self.selected = plist.selected_id
        for st in look.ended:
            self._phase_ended(st)
        for alert in look.alerts:
            self._stalled(alert)
        self._show_detail()
        self._auto_preflight()

    def _config_reread(self) -> None:
        """The config's files changed and the project took them: check results judged under
        the old values are dropped (the pre-flight runs again), the titles say the values
        now in effect."""
        cfg = self.project.config
        self.checks, self.shown = {}, {}
        self.preflights = PreflightSchedule(self.iv.preflight)
        self._title_phases()
        self.notify(f"{cfg.path.name} or its saved overrides changed: the console now uses them",
                    title="config", timeout=6)

    def _select_on_attach(self, plist: PhaseList) -> None:
        """Open on what matters: the running phase, else the first that is not done."""
        pick = next((s for s in self.statuses if s.state in LIVE), None) or next(
            (s for s in self.statuses if s.state != State.DONE), None) or (self.statuses[0] if self.statuses else None)
        if pick is None:
            return
        plist.select_id(pick.phase.id)
        self.selected = pick.phase.id

    def _auto_preflight(self) -> None:
        """Not journaled: only operator checks are decisions."""
        for pid in self.preflights.due(self.statuses):
            self._preflight(pid)

    def _preflight(self, phase_id: str) -> None:
        """Fails silently (its group is quiet): an operator's own check (c) shows the error."""
        self.run_worker(partial(self._checks, phase_id, "preflight"), name=f"pre-flight {phase_id}",
                        group="preflight", thread=True, exit_on_error=False)

    def _phase_ended(self, st: PhaseStatus) -> None:
        self.ended.append((st.phase.id, st.state))
        self.app.bell()
        good = st.state == State.DONE
        text = f"{st.phase.id} {st.state}"
        if st.reason:
            text += f": {st.reason}"
        self.notify(text, title="phase ended", severity="information" if good else "error",
                    timeout=10 if good else 30)

    def _stalled(self, alert: StallAlert) -> None:
        self.alerts.append(alert)
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
        self._show_detail()
        self.pollers["log"].poke()
        self.pollers["journal"].poke()

    def _show_detail(self) -> None:
        st = self.by_id.get(self.selected or "")
        header = self.query_one(DetailHeader)
        if st is None:
            header.view = NO_PHASE
            return
        pid = st.phase.id
        header.view = heading(st, stalled=pid in self.stalled, first_unit=pid in self.first_unit,
                              now=self.clock(), wide=self.size.width >= 100)
        snap = self.stats.get(pid)
        self.query_one(StatsPanel).show(None if is_empty(snap) else snap)
        self.query_one(DetailCharts).show(st, snap)
        self._show_checks(st)

    def _show_checks(self, st: PhaseStatus) -> None:
        view = self.query_one(ChecksView)
        shown = self.shown.get(st.phase.id)
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
        if kind in ("check", "preflight"):
            self.checks = {**self.checks, phase_id: results}
        self.shown[phase_id] = ("verify" if kind == "verify" else "check", results)
        if redraw:
            self._show_detail()

    def on_starts_changed(self, _msg: StartsChanged) -> None:
        self.query_one(PhaseList).show(self.statuses, self.stalled, self.flow.starting)

    def on_start_checked(self, msg: StartChecked) -> None:
        self.remember_checks(msg.phase_id, "check", msg.results)

    def on_start_launched(self, _msg: StartLaunched) -> None:
        self.pollers["status"].poke()
        self.pollers["log"].poke()

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
            self._run_checks(pid, "check")

    def action_verify(self) -> None:
        if not self._acting("verify"):
            return
        if (pid := self._phase_or_warn()) is not None:
            self.notify(f"verifying {pid}…", timeout=2)
            self._run_checks(pid, "verify")

    def action_expand_checks(self) -> None:
        shown = self.query_one(ChecksView).shown
        self.app.push_screen(ChecksScreen(self.selected or "", shown.title, shown.results, shown.hint))

    def _run_checks(self, phase_id: str, kind: str) -> None:
        self.run_worker(partial(self._checks, phase_id, kind), name=f"{kind} {phase_id}", group="checks",
                        thread=True, exit_on_error=False)

    def _checks(self, phase_id: str, kind: str) -> None:
        """(A thread worker: raising is the worker's failure, shown by `WorkerNotices`.)
        Only the checks an operator asked for are journaled: those are decisions."""
        if kind == "verify":
            results = self.project.verify(phase_id)
        else:
            results = self.project.check(phase_id, journal=kind == "check")
        self.post_message(ChecksDone(phase_id, results, kind))

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
        self._show_detail()

    def on_action_failed(self, msg: ActionFailed) -> None:
        self.notify(msg.text, severity="error", timeout=15)

    def action_run(self) -> None:
        if not self._acting("run"):
            return
        if (pid := self._phase_or_warn()) is not None:
            self.flow.begin(pid)

    def start_phase(self, phase_id: str, overrides: dict[str, str], confirmed: bool) -> None:
        """Start with these answers, asking nothing (its checks still run)."""
        if self._acting("run"):
            self.flow.start(StartRequest(phase_id, overrides, confirmed))

    def on_start_outcome(self, msg: StartOutcome) -> None:
        self.flow.outcome(msg)

    def action_stop(self) -> None:
        if not self._acting("stop"):
            return
        pid = self._phase_or_warn()
        if pid is None:
            return
        st = self.by_id.get(pid)
        if st is None or st.state not in LIVE or st.run is None:
            self.notify(f"{pid} is not running", severity="warning")
            return
        run_id = st.run.run_id

        def answer(yes: bool | None) -> None:
            if yes:
                self.run_worker(partial(self._stop, pid, run_id), name=f"stop {pid}", group="stop",
                                thread=True, exit_on_error=False)

        self.app.push_screen(AskDialog(
            f"stop {pid}?",
            Content.assemble("Stop ", (pid, "bold"), f" (run {run_id}", (f", pid {st.pid}" if st.pid else ""),
                             ")? Its process group gets SIGTERM, then SIGKILL after a grace period. "
                             "The stop is journaled."),
            yes="Stop", danger=True), answer)

    def _stop(self, phase_id: str, run_id: str) -> None:
        """(A thread worker.) Stops the run the operator was asked about, and only that one: a
        phase restarted while the question was open is left alone, an outcome the operator
        reads, not a failure."""
        current = self.project.run_dir(phase_id)
        if current is None or current.run_id != run_id:
            now = current.run_id if current is not None else "none"
            self.post_message(ActionFailed(
                f"{phase_id} was restarted while you were asked (run {run_id} -> {now}); nothing was "
                f"stopped. Press s again to stop the new run."))
            return
        if not self.project.stop(phase_id, run_id=run_id):
            self.post_message(ActionFailed(f"{phase_id} was not running"))
        self.call_later_safe()

    def call_later_safe(self) -> None:
        try:
            self.app.call_from_thread(self.pollers["status"].poke)
        except RuntimeError:
            pass

    def action_next_live(self) -> None:
        """The next running phase after the selected one (in config order, round again)."""
        live = [s.phase.id for s in self.statuses if s.state in LIVE]
        if not live:
            self.notify("no phase is running", severity="warning", timeout=4)
            return
        ids = [s.phase.id for s in self.statuses]
        here = ids.index(self.selected) if self.selected in ids else -1
        pick = next((p for p in live if ids.index(p) > here), live[0])
        self.query_one(PhaseList).select_id(pick)
        self.selected = pick

    def action_deadline(self) -> None:
        if self._acting("a deadline"):
            self.app.push_screen(DeadlineDialog(self.deadline, self.clock()), self._deadline_typed)

    def _deadline_typed(self, answer: DeadlineTyped | None) -> None:
        if answer is not None:
            self.run_worker(partial(self._set_deadline, answer), name="deadline", group="deadline",
                            thread=True, exit_on_error=False)

    def _set_deadline(self, answer: DeadlineTyped) -> None:
        """(A thread worker.) The project's deadline, which the runs' launchers keep."""
        if answer.at is None:
            said = "deadline cleared" if self.project.clear_deadline() else "no deadline was set"
        else:
            due = self.project.set_deadline(answer.at, f"console: {answer.typed}")
            said = f"deadline {due.clock()}: running phases then get the stop s sends and keep their checkpoints"
        self.app.call_from_thread(self.notify, said, title="deadline", timeout=8)
        self.call_later_safe()

    def action_log(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.app.push_screen(LogScreen(pid, self.log_path_of(pid), interval=self.iv.log))

    def action_history(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.app.push_screen(HistoryScreen(self.project, pid, interval=self.iv.log))

    def action_journal(self) -> None:
        self.app.push_screen(JournalScreen(self.project, self.selected, interval=self.iv.journal))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def running(self) -> list[PhaseStatus]:
        return [s for s in self.statuses if s.state in LIVE]
