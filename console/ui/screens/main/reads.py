"""The main screen's reads, made in its pollers' threads: data in, a message out, no DOM.
The status poller looks at the project (`console.core.flow.watch`), the panels' pollers
read their sources, the log and journal pollers read what the selected phase wrote."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from textual.dom import DOMNode
from textual.message import Message

from console.core.flow.watch import PhaseWatch, disk_outlook, gpu_owners
from console.core.lifecycle.project import Project
from console.core.telemetry.history import DiskForecast
from console.core.telemetry.samples import DiskReading, GpuReading, HostReading, ShmReading, Source
from console.ui.logfeed import LogFeed
from console.ui.messages import DiskUpdated, GpuUpdated, HostUpdated, JournalRead, ShmUpdated, SnapshotUpdated
from console.ui.pollers import Poller
from console.ui.screens.main.follow import CheckMemory, PhaseFollow

DETAIL_LOG_LINES = 1000


class Intervals:
    """Poll periods in seconds (tests shorten them). GPUs every 2 s, as nvitop does; disks
    every 5 s (their rate is a minute's median); the log 4 times a second, since that is
    where an operator looks while a phase runs (a read with nothing new costs a stat)."""

    def __init__(self, status: float = 1.0, gpu: float = 2.0, disk: float = 5.0, shm: float = 5.0,
                 host: float = 3.0, log: float = 0.25, journal: float = 2.0, preflight: float = 60.0) -> None:
        self.status, self.gpu, self.disk, self.shm = status, gpu, disk, shm
        self.host, self.log, self.journal = host, log, journal
        self.preflight = preflight  # re-check ready/blocked phases this often; 0 turns it off


@dataclass(frozen=True)
class Sources:
    """What the panels poll; a source left out (None) has no poller and its panel stays empty."""

    gpu: Source[GpuReading] | None = None
    disk: Source[DiskReading] | None = None
    shm: Source[ShmReading] | None = None
    host: Source[HostReading] | None = None


class MainReads:
    """Each read runs in its poller's thread. What it needs of the UI loop's state (the
    selected phase, the follow, the checks, whether the journal pane shows) it reads from
    attributes the UI loop replaces whole."""

    def __init__(self, project: Project, sources: Sources, follow: PhaseFollow, memory: CheckMemory,
                 selected: Callable[[], str | None], clock: Callable[[], float]) -> None:
        self.project = project
        self.sources = sources
        self.follow = follow
        self.memory = memory
        self.selected = selected
        self.watch = PhaseWatch(project, clock=clock)
        self.journal_visible = False  # the UI loop sets it from the screen's width
        self._forecast = DiskForecast()
        self._journal_seen: tuple[object, ...] = ()
        self.log_feed = LogFeed("main", self.selected_log_path, DETAIL_LOG_LINES, paced=True)

    def snapshot(self) -> SnapshotUpdated:
        return SnapshotUpdated(self.watch.look(self.memory.checks))

    def gpu(self, source: Source[GpuReading]) -> GpuUpdated:
        reading = source.read()
        return GpuUpdated(reading, gpu_owners(reading, self.follow.sessions))

    def disk(self, source: Source[DiskReading]) -> DiskUpdated:
        reading = source.read()
        forecasts = disk_outlook(self._forecast, reading)
        return DiskUpdated(reading, forecasts, self.watch.space_needs(self.follow.snapshot, self._forecast))

    def shm(self, source: Source[ShmReading]) -> ShmUpdated:
        return ShmUpdated(source.read())

    def host(self, source: Source[HostReading]) -> HostUpdated:
        return HostUpdated(source.read())

    def journal(self) -> JournalRead | None:
        selected = self.selected()
        if not self.journal_visible or selected is None:
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

    def selected_log_path(self) -> str | None:
        return self.follow.log_path(self.selected() or "")

    def pollers(self, owner: DOMNode, iv: Intervals) -> dict[str, Poller]:
        """One poller a read, each posting to `owner`; a panel whose source is None gets none."""
        src = self.sources
        reads: dict[str, tuple[float, Callable[[], Message | None]]] = {
            "status": (iv.status, self.snapshot), "log": (iv.log, self.log_feed.read),
            "journal": (iv.journal, self.journal)}
        if src.gpu is not None:
            reads["gpu"] = (iv.gpu, partial(self.gpu, src.gpu))
        if src.disk is not None:
            reads["disk"] = (iv.disk, partial(self.disk, src.disk))
        if src.shm is not None:
            reads["shm"] = (iv.shm, partial(self.shm, src.shm))
        if src.host is not None:
            reads["host"] = (iv.host, partial(self.host, src.host))
        return {name: Poller(owner, name, interval, read) for name, (interval, read) in reads.items()}
