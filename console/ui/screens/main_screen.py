"""The main screen: the phase checklist beside the live panels, and under them the
selected phase's detail (state, live stats, checks, log, and on wide terminals its
journal). Every read runs in a poller's thread; handlers only store and redraw."""

from __future__ import annotations

import time
from collections.abc import Callable
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
from console.core.livestats import EventTail, LiveSnapshot
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
    SpaceNeed,
    StatusesUpdated,
)
from console.ui.pollers import Poller
from console.ui.render import fmt_duration, state_glyph, state_style
from console.ui.screens.ask_dialog import AskDialog
from console.ui.screens.blocked_dialog import BlockedDialog
from console.ui.screens.confirm_dialog import ConfirmDialog
from console.ui.screens.help_screen import HelpScreen
from console.ui.screens.journal_screen import JournalScreen
from console.ui.screens.log_screen import LogScreen

LIVE = ("running", "verifying")
ENDED = ("done", "failed", "stopped", "stale")
DETAIL_LOG_LINES = 1000


class StartOutcome(Message):
    """What `Project.start` did: a run dir, or the exception that says what it needs."""

    def __init__(self, phase_id: str, result: Any, overrides: dict[str, str], confirmed: bool) -> None:
        super().__init__()
        self.phase_id = phase_id
        self.result = result
        self.overrides = overrides
        self.confirmed = confirmed


class ActionFailed(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class Intervals:
    """Poll periods in seconds (tests shorten them)."""

    def __init__(self, status: float = 1.0, gpu: float = 1.0, disk: float = 2.0, shm: float = 2.0,
                 host: float = 2.0, log: float = 0.25, journal: float = 2.0, preflight: float = 60.0) -> None:
        self.status, self.gpu, self.disk, self.shm = status, gpu, disk, shm
        self.host, self.log, self.journal = host, log, journal
        self.preflight = preflight  # re-check ready/blocked phases this often; 0 turns it off


class MainScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide"), (160, "-very-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    BINDINGS = [
        Binding("r", "run", "Run", id="main.run", tooltip="Run the selected phase (pre-flight checks first)"),
        Binding("s", "stop", "Stop", id="main.stop", tooltip="Stop the selected phase (asks first)"),
        Binding("c", "check", "Check", id="main.check", tooltip="Run the selected phase's pre-flight checks"),
        Binding("v", "verify", "Verify", id="main.verify", tooltip="Run the selected phase's verify checks"),
        Binding("l", "log", "Log", id="main.log", tooltip="The selected phase's log, full screen"),
        Binding("J", "journal", "Journal", id="main.journal", tooltip="Runs, checks, overrides and stops"),
        Binding("t", "app.next_theme", "Theme", id="main.theme", tooltip="Switch to the next theme"),
        Binding("question_mark", "help", "Help", id="main.help", tooltip="Keys and state glyphs"),
        Binding("q", "app.request_quit", "Quit", id="main.quit", tooltip="Quit; running phases keep running"),
    ]

    def __init__(self, project: Any, *, gpu_source: Any, disk_source: Any, shm_source: Any,
                 host_source: Any, clock: Callable[[], float] = time.time,
                 intervals: Intervals | None = None) -> None:
        super().__init__()
        self.project = project
        self.sources = {"gpu": gpu_source, "disk": disk_source, "shm": shm_source, "host": host_source}
        self.clock = clock
        self.iv = intervals or Intervals()
        self._prechecked: dict[str, float] = {}
        self.statuses: list[Any] = []
        self.by_id: dict[str, Any] = {}
        self.checks: dict[str, list[CheckResult]] = {}
        self.shown: dict[str, tuple[str, list[CheckResult]]] = {}
        self.stats: dict[str, LiveSnapshot] = {}
        self.selected: str | None = None
        self.ended: list[tuple[str, str]] = []  # (phase, state) seen ending while watched
        self._event_tails: dict[str, EventTail] = {}
        self._forecast = DiskForecast()
        self._first_status = True
        self._header_plain = ""
        self._journal_seen: tuple[object, ...] = ()
        self.log_feed = LogFeed("main", self._selected_log_path, DETAIL_LOG_LINES)
        self.pollers: dict[str, Poller] = {
            "status": Poller(self, "status", self.iv.status, self._read_statuses),
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
            yield PhaseList(clock=self.clock, id="phases")
            with Vertical(id="live"):
                yield GpuPanel(id="gpu")
                with Vertical(id="storage"):
                    yield DiskPanel(id="disk")
                    yield ShmPanel(id="shm")
                    yield HostPanel(id="host")
        with Vertical(id="detail"):
            yield Static(id="detail-header")
            yield StatsPanel(id="stats")
            with Horizontal(id="detail-body"):
                yield ChecksView(id="checks")
                yield LogView(max_lines=DETAIL_LOG_LINES, id="log")
                yield JournalView(id="journal")
        yield Footer()

    def on_mount(self) -> None:
        cfg = self.project.config
        self.query_one("#phases").border_title = f"phases · {cfg.name}"
        self.query_one("#storage").border_title = "disk · shm · host"
        self.query_one("#log").border_title = "log"
        self.query_one("#journal").border_title = "journal"
        self.query_one("#stats").display = False
        self.query_one(PhaseList).focus()
        for poller in self.pollers.values():
            poller.start()

    def on_unmount(self) -> None:
        for poller in self.pollers.values():
            poller.stop()

    # -- reads (poller threads) ---------------------------------------------------------------
    def _read_statuses(self) -> StatusesUpdated:
        statuses = self.project.statuses(checks=dict(self.checks))
        stats: dict[str, LiveSnapshot] = {}
        for st in statuses:
            run = st.run
            if run is None:
                continue
            key = str(run.events_jsonl)
            tail = self._event_tails.get(st.phase.id)
            if tail is None or tail.path != key:
                tail = self._event_tails[st.phase.id] = EventTail(key)
            elif st.state not in LIVE and st.phase.id in self.stats:
                stats[st.phase.id] = self.stats[st.phase.id]
                continue
            tail.poll()
            stats[st.phase.id] = tail.stats.snapshot()
        return StatusesUpdated(statuses, stats)

    def _sessions(self) -> dict[int, str]:
        return {s.pid: s.phase.id for s in self.statuses if s.state in LIVE and s.pid}

    def _read_gpu(self) -> GpuUpdated:
        reading = self.sources["gpu"].read()
        owner = owner_map(self._sessions())
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
        needs: dict[str, SpaceNeed] = {}
        for st in self.statuses:
            snap = self.stats.get(st.phase.id)
            if st.state not in LIVE or snap is None or not snap.remaining_bytes:
                continue
            for out in st.phase.outputs:
                vol = self._forecast.volume_for(self.project.config.resolve(out))
                if vol is not None:
                    prev = needs.get(vol)
                    needs[vol] = SpaceNeed((prev.bytes if prev else 0) + int(snap.remaining_bytes),
                                           (prev.phases if prev else ()) + (st.phase.id,))
                    break
        return DiskUpdated(reading, forecasts, needs)

    def _read_shm(self) -> ShmUpdated:
        return ShmUpdated(self.sources["shm"].read())

    def _read_host(self) -> HostUpdated:
        return HostUpdated(self.sources["host"].read())

    def _read_journal(self) -> JournalRead | None:
        if not self.query_one("#journal").display or self.selected is None:
            return None
        try:
            st = self.project.journal.path.stat()
            seen: tuple[object, ...] = (self.selected, st.st_size, st.st_mtime_ns)
        except OSError:
            seen = (self.selected, None)
        if seen == self._journal_seen:
            return None
        self._journal_seen = seen
        return JournalRead(self.selected, self.project.journal.read(phase=self.selected, limit=50))

    def _selected_log_path(self) -> str | None:
        st = self.by_id.get(self.selected or "")
        return str(st.run.output_log) if st is not None and st.run is not None else None

    def log_path_of(self, phase_id: str) -> Callable[[], str | None]:
        def path() -> str | None:
            st = self.by_id.get(phase_id)
            return str(st.run.output_log) if st is not None and st.run is not None else None
        return path

    # -- updates (UI loop) ------------------------------------------------------------------
    def on_statuses_updated(self, msg: StatusesUpdated) -> None:
        before = {s.phase.id: s.state for s in self.statuses}
        self.statuses = msg.statuses
        self.by_id = {s.phase.id: s for s in msg.statuses}
        self.stats = msg.stats
        plist = self.query_one(PhaseList)
        plist.show(msg.statuses)
        if self.selected is None and plist.selected_id is not None:
            self._select(plist.selected_id)
        if not self._first_status:
            for st in msg.statuses:
                was = before.get(st.phase.id)
                if was in LIVE and st.state not in LIVE:
                    self._phase_ended(st)
        self._first_status = False
        self._show_detail()
        self._auto_preflight()

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
        self.post_message(ChecksDone(phase_id, results, "check"))

    def _phase_ended(self, st: Any) -> None:
        self.ended.append((st.phase.id, st.state))
        self.app.bell()
        good = st.state == "done"
        text = f"{st.phase.id} {st.state}"
        if st.reason:
            text += f": {st.reason}"
        self.notify(text, title="phase ended", severity="information" if good else "error",
                    timeout=10 if good else 30)

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
        bits: list[Any] = [state_glyph(st.state), " ", (ph.id, "bold"), " · ", ph.title, " · ",
                           (st.state, state_style(st.state))]
        dur = phase_duration(st, self.clock())
        if dur is not None:
            bits += [" ", (fmt_duration(dur), "$text-muted")]
        if st.exit_code is not None and st.state not in LIVE:
            bits += [("  exit ", "$text-muted"), str(st.exit_code)]
        if ph.kind == "service":
            bits += [("  service", "$text-muted")]
        if ph.confirm:
            bits += [("  destructive", "$warning")]
        if st.reason:
            bits += ["\n", (st.reason.splitlines()[0], state_style(st.state) if st.state in ("blocked", "failed", "stale") else "$text-muted")]
        content = Content.assemble(*bits)
        if content.plain != self._header_plain:
            self._header_plain = content.plain
            header.update(content)
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

    # -- actions ------------------------------------------------------------------------------
    def _phase_or_warn(self) -> str | None:
        if self.selected is None:
            self.notify("no phase selected", severity="warning")
        return self.selected

    def action_check(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.notify(f"checking {pid}…", timeout=2)
            self._run_checks(pid, "check")

    def action_verify(self) -> None:
        if (pid := self._phase_or_warn()) is not None:
            self.notify(f"verifying {pid}…", timeout=2)
            self._run_checks(pid, "verify")

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
        if msg.kind == "check":
            self.checks[msg.phase_id] = msg.results
        self.shown[msg.phase_id] = (msg.kind, msg.results)
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
        pid = self._phase_or_warn()
        if pid is None:
            return
        st = self.by_id.get(pid)
        if st is not None and st.state in LIVE:
            self.notify(f"{pid} is already {st.state}", severity="warning")
            return
        if st is not None and st.state == "done":
            after = [s.phase.id for s in self.statuses if pid in s.phase.needs]

            def again(yes: bool | None) -> None:
                if yes:
                    self.notify(f"starting {pid}: pre-flight checks…", timeout=3)
                    self.start_phase(pid, {}, False)

            tail = f" Phases that need it ({', '.join(after)}) become stale." if after else ""
            self.app.push_screen(AskDialog(
                f"run {pid} again?",
                Content.assemble((pid, "bold"), f" is done.{tail} Run it again?"),
                yes="Run again"), again)
            return
        self.notify(f"starting {pid}: pre-flight checks…", timeout=3)
        self.start_phase(pid, {}, False)

    @work(thread=True, group="start", exit_on_error=False)
    def start_phase(self, phase_id: str, overrides: dict[str, str], confirmed: bool) -> None:
        try:
            result: Any = self.project.start(phase_id, overrides=overrides or None, confirmed=confirmed)
        except Exception as exc:  # noqa: BLE001 - every outcome is handled on the UI loop
            result = exc
        self.post_message(StartOutcome(phase_id, result, overrides, confirmed))

    def on_start_outcome(self, msg: StartOutcome) -> None:
        from console.core.project import Blocked, NeedsConfirmation

        res = msg.result
        if isinstance(res, Blocked):
            self.checks[msg.phase_id] = res.results
            self.shown[msg.phase_id] = ("check", res.results)
            self._show_detail()

            def overridden(choice: dict[str, str] | None) -> None:
                if choice:
                    self.start_phase(msg.phase_id, {**msg.overrides, **choice}, msg.confirmed)

            self.app.push_screen(BlockedDialog(msg.phase_id, res.results), overridden)
        elif isinstance(res, NeedsConfirmation):
            def confirmed(ok: bool | None) -> None:
                if ok:
                    self.start_phase(msg.phase_id, msg.overrides, True)
                else:
                    self.notify(f"{msg.phase_id} not started", timeout=3)

            self.app.push_screen(ConfirmDialog(msg.phase_id, res.summary), confirmed)
        elif isinstance(res, Eagle3Error):
            self.notify(str(res), severity="error", timeout=15)
        elif isinstance(res, Exception):
            self.notify(f"could not start {msg.phase_id}: {type(res).__name__}: {res}", severity="error", timeout=15)
        else:
            self.notify(f"{msg.phase_id} started", severity="information", timeout=4)
            seen = self.project.last_checks.get(msg.phase_id)
            if seen is not None:  # the pre-flight results the start passed on
                self.checks[msg.phase_id] = seen
                self.shown[msg.phase_id] = ("check", seen)
                self._show_detail()
            self.pollers["status"].poke()
            self.pollers["log"].poke()

    def action_stop(self) -> None:
        pid = self._phase_or_warn()
        if pid is None:
            return
        st = self.by_id.get(pid)
        if st is None or st.state not in LIVE:
            self.notify(f"{pid} is not running", severity="warning")
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._stop(pid)

        self.app.push_screen(AskDialog(
            f"stop {pid}?",
            Content.assemble("Stop ", (pid, "bold"), (f" (pid {st.pid})" if st.pid else ""), "? Its process group gets SIGTERM, "
                             "then SIGKILL after a grace period. The stop is journaled."),
            yes="Stop", danger=True), answer)

    @work(thread=True, group="stop", exit_on_error=False)
    def _stop(self, phase_id: str) -> None:
        try:
            stopped = self.project.stop(phase_id)
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

    def action_journal(self) -> None:
        self.app.push_screen(JournalScreen(self.project, self.selected, interval=self.iv.journal))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def running(self) -> list[Any]:
        return [s for s in self.statuses if s.state in LIVE]
