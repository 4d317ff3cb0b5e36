"""The main screen: the phase checklist beside the live panels, and under them the
selected phase's detail (state, live stats, checks, log, and on wide terminals its
journal).

Every read runs in a poller's thread and returns data: the project snapshot comes from
`console.core.snapshot` (the same one `eagle3 status --json` prints), and the handlers on
the UI loop only store it and redraw. Starting a phase (checks, overrides, confirmation)
lives in `console.ui.startflow`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static

from console.core.checks.result import CheckResult
from console.core.errors import Eagle3Error
from console.core.livestats import LiveSnapshot
from console.core.notify import Notifier, ended_notice
from console.core.runs.manager import run_status
from console.core.snapshot import Snapshot, SnapshotBuilder
from console.core.stall import StallAlert, StallWatch
from console.core.telemetry.history import DiskForecast
from console.core.telemetry.ownership import owner_map
from console.ui.components.checks_view import ChecksView
from console.ui.components.disk_panel import DiskPanel
from console.ui.components.gpu_panel import GpuPanel
from console.ui.components.host_panel import HostPanel
from console.ui.components.journal_view import JournalView
from console.ui.components.log_view import LogView
from console.ui.components.phase_list import PhaseList, phase_duration
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
from console.ui.render import fmt_duration, fmt_time, state_glyph, state_style
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.help_screen import HelpScreen
from console.ui.screens.journal_screen import JournalScreen
from console.ui.screens.log_screen import LogScreen
from console.ui.startflow import StartFlow, StartOutcome

LIVE = ("running", "verifying")
ENDED = ("done", "failed", "stopped", "stale")
DETAIL_LOG_LINES = 1000


@dataclass
class SnapshotUpdated(Message):
    """A fresh project snapshot, the phases that ended or stalled since the last one, and
    (on the first one only) the checks each running phase's start passed, from the journal."""

    snapshot: Snapshot
    ended: list[Any] = field(default_factory=list)
    alerts: list[StallAlert] = field(default_factory=list)
    attach_checks: dict[str, list[CheckResult]] = field(default_factory=dict)


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


def checks_from_journal(journal: Any, phase_id: str, started_at: float | None) -> list[CheckResult] | None:
    """The pre-flight results the latest start of a phase passed (its last `checks` record
    before the run started), so a console that attaches later can show them."""
    try:
        records = journal.read(phase=phase_id, limit=200, events={"checks"})
    except Exception:  # noqa: BLE001 - context is a nicety; never block the attach
        return None
    for rec in reversed(records):
        t = rec.get("t")
        if started_at is not None and isinstance(t, (int, float)) and t > started_at + 5:
            continue
        try:
            return [CheckResult.from_json(r) for r in rec.get("results") or []]
        except Exception:  # noqa: BLE001
            return None
    return None


def phases_title(name: str, saved: dict[str, str], width: int = 60) -> str:
    """The config's name and the overrides `eagle3 set` saved, which every command applies:
    an operator sees at a glance that the YAML is not the whole story."""
    title = f"phases · {name}"
    if saved:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(saved.items()))
        title += f" · set {shown}"
    return title if len(title) <= width else title[: width - 1] + "…"


class MainScreen(Screen[None]):
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
        Binding("e", "expand_checks", "Passing checks", show=False, id="main.expand",
                tooltip="Show or fold the checks that pass"),
        Binding("t", "app.next_theme", "Theme", show=False, id="main.theme", tooltip="Switch to the next theme"),
    ]

    def __init__(self, project: Any, *, gpu_source: Any, disk_source: Any, shm_source: Any,
                 host_source: Any, clock: Callable[[], float] = time.time,
                 intervals: Intervals | None = None, read_only: bool = False) -> None:
        super().__init__()
        self.project = project
        self.read_only = read_only
        self.sources = {"gpu": gpu_source, "disk": disk_source, "shm": shm_source, "host": host_source}
        self.clock = clock
        self.iv = intervals or Intervals()
        self.builder = SnapshotBuilder(project, clock=clock)
        self.notifier = Notifier(project.config, project.journal)
        self.stall_watch = StallWatch(project.journal, self.notifier)
        self.flow = StartFlow(self)
        self.snapshot: Snapshot | None = None
        self.snapshots_handled = 0
        self._prechecked: dict[str, float] = {}
        self.statuses: list[Any] = []
        self.by_id: dict[str, Any] = {}
        self.stats: dict[str, LiveSnapshot] = {}
        self.stalled: set[str] = set()
        self.checks: dict[str, list[CheckResult]] = {}  # replaced, never mutated: pollers read it
        self.shown: dict[str, tuple[str, list[CheckResult]]] = {}
        self.selected: str | None = None
        self.ended: list[tuple[str, str]] = []
        self.alerts: list[StallAlert] = []
        self._sessions: dict[int, str] = {}
        self._prev_states: dict[str, str] | None = None
        self._prev_stalled: set[str] = set()
        self._journal_visible = False
        self._forecast = DiskForecast()
        self._header_plain = ""
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
            yield Static(id="detail-header")
            yield StatsPanel(id="stats")
            with Horizontal(id="detail-body"):
                yield ChecksView(id="checks")
                yield LogView(max_lines=DETAIL_LOG_LINES, titled=True, id="log")
                yield JournalView(id="journal")
        yield Footer()

    def on_mount(self) -> None:
        cfg = self.project.config
        self.query_one("#phases").border_title = phases_title(cfg.name, cfg.saved_overrides)
        self.query_one("#storage").border_title = "disk · shm · host"
        self.query_one("#journal").border_title = "journal"
        self.query_one("#stats").display = False
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

    def _layout_flags(self) -> None:
        """What the pollers may read without touching the DOM, and the compact stats."""
        self._journal_visible = self.size.width >= 160
        self.query_one(StatsPanel).set_compact(self.size.height < 36)

    def on_unmount(self) -> None:
        for poller in self.pollers.values():
            poller.stop()

    # -- reads (poller threads: data in, data out, no DOM) ----------------------------------
    def _read_snapshot(self) -> SnapshotUpdated:
        snap = self.builder.build(checks=self.checks)
        # Journals and sends each silence once, whether this console or the run's launcher
        # (or another console) sees it first; what this console shows is its own (below).
        self.stall_watch.update(snap.phases, now=snap.t)
        ended: list[Any] = []
        alerts: list[StallAlert] = []
        attach: dict[str, list[CheckResult]] = {}
        if self._prev_states is None:
            for pv in snap.phases:
                if pv.status.state in LIVE and pv.id not in self.checks:
                    found = checks_from_journal(self.project.journal, pv.id, pv.status.started_at)
                    if found:
                        attach[pv.id] = found
        else:
            for pv in snap.phases:
                if self._prev_states.get(pv.id) in LIVE and pv.status.state not in LIVE:
                    ended.append(pv.status)
                if pv.stalled and pv.id not in self._prev_stalled and pv.status.run is not None:
                    alerts.append(StallAlert(pv.id, pv.status.run.run_id, pv.silent_s or 0.0, pv.stall_after))
        self._prev_states = {pv.id: pv.status.state for pv in snap.phases}
        self._prev_stalled = {pv.id for pv in snap.phases if pv.stalled}
        for st in ended:
            # A run's launcher sends its end; one that died (lost) cannot, so the console does.
            if st.run is not None and run_status(st.run).state == "lost":
                event, summary = ended_notice(st)
                self.notifier.fire(event, st.phase.id, st.state, st.run.run_id, summary)
        return SnapshotUpdated(snap, ended, alerts, attach)

    def _read_gpu(self) -> GpuUpdated:
        reading = self.sources["gpu"].read()
        owner = owner_map(self._sessions)
        owners: dict[int, str] = {}
        for g in reading.gpus:
            for p in g.processes:
                ph = owner(p.pid)
                if ph is not None:
                    owners[p.pid] = ph
        return GpuUpdated(reading, owners)

    def _read_disk(self) -> DiskUpdated:
        reading = self.sources["disk"].read()
        self._forecast.update(reading)
        forecasts = {f.path: f for f in self._forecast.forecasts()}
        snap = self.snapshot
        needs = self.builder.space_needs(snap, self._forecast.volume_for) if snap is not None else {}
        return DiskUpdated(reading, forecasts, needs)

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
        snap = self.snapshot = msg.snapshot
        self.statuses = snap.statuses
        self.by_id = {s.phase.id: s for s in self.statuses}
        self.stats = snap.stats
        self.stalled = {pv.id for pv in snap.phases if pv.stalled}
        self._sessions = snap.sessions()
        for pid, results in msg.attach_checks.items():
            self.remember_checks(pid, "check", results, redraw=False)
        plist = self.query_one(PhaseList)
        plist.show(self.statuses, self.stalled, self.flow.starting)
        if first:
            self._select_on_attach(plist)
        elif self.selected is None and plist.selected_id is not None:
            self._select(plist.selected_id)
        for st in msg.ended:
            self._phase_ended(st)
        for alert in msg.alerts:
            self._stalled(alert)
        self._show_detail()
        self._auto_preflight()

    def _select_on_attach(self, plist: PhaseList) -> None:
        """Open on what matters: the running phase, else the first that is not done."""
        pick = next((s for s in self.statuses if s.state in LIVE), None) or next(
            (s for s in self.statuses if s.state != "done"), None) or (self.statuses[0] if self.statuses else None)
        if pick is None:
            return
        plist.select_id(pick.phase.id)
        self._select(pick.phase.id)

    def _auto_preflight(self) -> None:
        """Pre-flight the phases that could start next, so the checklist says why one is
        blocked before anyone presses r. Not journaled: only operator checks are decisions."""
        every = self.iv.preflight
        if every <= 0:
            return
        now = time.monotonic()
        for st in self.statuses:
            pid = st.phase.id
            if st.state not in ("ready", "blocked"):
                continue
            last = self._prechecked.get(pid)
            if last is not None and now - last < every:
                continue
            self._prechecked[pid] = now
            self._preflight(pid)

    @work(thread=True, group="preflight", exit_on_error=False)
    def _preflight(self, phase_id: str) -> None:
        try:
            results = self.project.check(phase_id, journal=False)
        except Exception:  # noqa: BLE001 - an operator's own check (c) shows the error
            return
        self.post_message(ChecksDone(phase_id, results, "preflight"))

    def _phase_ended(self, st: Any) -> None:
        self.ended.append((st.phase.id, st.state))
        self.app.bell()
        good = st.state == "done"
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
        if event.option.id is not None and event.option.id != self.selected:
            self._select(event.option.id)

    def _select(self, phase_id: str) -> None:
        self.selected = phase_id
        self._show_detail()
        self.pollers["log"].poke()
        self.pollers["journal"].poke()

    def _show_detail(self) -> None:
        st = self.by_id.get(self.selected or "")
        header = self.query_one("#detail-header", Static)
        if st is None:
            header.update(Content.styled("no phase selected", "$text-muted"))
            self._header_plain = ""
            return
        ph = st.phase
        stalled = ph.id in self.stalled and st.state == "running"
        bits: list[Any] = [state_glyph(st.state), " ", (ph.id, "bold"), " · ", ph.title, " · ",
                           (st.state, state_style(st.state))]
        if stalled:
            bits += ["  ", ("⚠ stalled", "bold $warning")]
        dur = phase_duration(st, self.clock())
        if dur is not None:
            bits += [" ", (fmt_duration(dur), "$text-muted")]
        if st.started_at is not None and self.size.width >= 100:
            bits += [(f"  started {fmt_time(st.started_at)}", "$text-muted")]
        if st.exit_code is not None and st.state not in LIVE:
            bits += [("  exit ", "$text-muted"), str(st.exit_code)]
        if ph.kind == "service":
            bits += [("  service", "$text-muted")]
        if ph.confirm:
            bits += [("  destructive", "$warning")]
        if st.reason and st.state not in LIVE:
            bits += ["\n", (st.reason.splitlines()[0], state_style(st.state) if st.state in ("blocked", "failed", "stale") else "$text-muted")]
        content = Content.assemble(*bits)
        if content.plain != self._header_plain:
            self._header_plain = content.plain
            height = len(content.wrap(max(1, header.content_region.width)))
            header.update(content, layout=height != header.content_region.height)
        snap = self.stats.get(ph.id)
        self.query_one(StatsPanel).show(None if is_empty(snap) else snap)
        self._show_checks(st)

    def _show_checks(self, st: Any) -> None:
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

    def starting_changed(self) -> None:
        plist = self.query_one(PhaseList)
        plist.show(self.statuses, self.stalled, self.flow.starting)

    def started(self, phase_id: str) -> None:
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
        self.query_one(ChecksView).action_toggle_passing()

    @work(thread=True, group="checks", exit_on_error=False)
    def _run_checks(self, phase_id: str, kind: str) -> None:
        try:
            results = self.project.check(phase_id) if kind == "check" else self.project.verify(phase_id)
        except Eagle3Error as exc:
            self.post_message(ActionFailed(str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - shown, never a traceback
            self.post_message(ActionFailed(f"{kind} {phase_id} failed: {type(exc).__name__}: {exc}"))
            return
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
        if self._acting("run"):
            self.flow.start(phase_id, overrides, confirmed)

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
                self._stop(pid, run_id)

        self.app.push_screen(AskDialog(
            f"stop {pid}?",
            Content.assemble("Stop ", (pid, "bold"), f" (run {run_id}", (f", pid {st.pid}" if st.pid else ""),
                             ")? Its process group gets SIGTERM, then SIGKILL after a grace period. "
                             "The stop is journaled."),
            yes="Stop", danger=True), answer)

    @work(thread=True, group="stop", exit_on_error=False)
    def _stop(self, phase_id: str, run_id: str) -> None:
        """Stops the run the operator was asked about, and only that one: a phase restarted
        while the question was open is left alone."""
        try:
            current = self.project.run_dir(phase_id)
            if current is None or current.run_id != run_id:
                now = current.run_id if current is not None else "none"
                self.post_message(ActionFailed(
                    f"{phase_id} was restarted while you were asked (run {run_id} -> {now}); nothing was "
                    f"stopped. Press s again to stop the new run."))
                return
            stopped = self.project.stop(phase_id, run_id=run_id)
        except Exception as exc:  # noqa: BLE001
            self.post_message(ActionFailed(str(exc) if isinstance(exc, Eagle3Error) else
                                           f"stop {phase_id} failed: {type(exc).__name__}: {exc}"))
            return
        if not stopped:
            self.post_message(ActionFailed(f"{phase_id} was not running"))
        self.call_later_safe()

    def call_later_safe(self) -> None:
        try:
            self.app.call_from_thread(self.pollers["status"].poke)
        except RuntimeError:
            pass

    def action_log(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.app.push_screen(LogScreen(pid, self.log_path_of(pid), interval=self.iv.log))

    def action_history(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            from console.ui.screens.history_screen import HistoryScreen

            self.app.push_screen(HistoryScreen(self.project, pid, interval=self.iv.log))

    def action_journal(self) -> None:
        self.app.push_screen(JournalScreen(self.project, self.selected, interval=self.iv.journal))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def running(self) -> list[Any]:
        return [s for s in self.statuses if s.state in LIVE]
