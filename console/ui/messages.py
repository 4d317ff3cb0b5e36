"""Every message the console's own code posts, in one place: the pollers' readings, the
thread workers' results and the start flow's steps. Each carries plain data already
computed off the UI loop, so a handler only stores it and refreshes a widget.

A panel's reading says everything the panel shows, so a newer one makes an older one
still queued worthless: those readings set `can_replace`, and a burst (a UI loop that
was busy for a few seconds) collapses into the latest. Log lines and check results
each add something, so every one of them is handled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from console.core.checks.result import CheckResult
from console.core.flow.startflow import StartRequest, StartResult
from console.core.flow.watch import Look
from console.core.lifecycle.snapshot import SpaceNeed
from console.core.telemetry.history import VolumeForecast
from console.core.telemetry.samples import DiskReading, GpuReading, HostReading, ShmReading


class Reading(Message):
    """A poller's whole reading of one panel: the latest queued one replaces the older."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


@dataclass
class SnapshotUpdated(Message):
    """A look at the project, carried from the status poller to the UI loop."""

    look: Look


@dataclass
class GpuUpdated(Reading):
    reading: GpuReading
    owners: dict[int, str]  # pid -> phase id


@dataclass
class DiskUpdated(Reading):
    reading: DiskReading
    forecasts: dict[str, VolumeForecast]
    needs: dict[str, SpaceNeed]


@dataclass
class ShmUpdated(Reading):
    reading: ShmReading


@dataclass
class HostUpdated(Reading):
    reading: HostReading


@dataclass
class LogLines(Message):
    """New lines of a log. `reset` means a different file (or the first read): replace."""

    key: str
    lines: list[str]
    partial: str
    reset: bool
    path: str | None


@dataclass
class ChecksDone(Message):
    phase_id: str
    results: list[CheckResult]
    kind: str = "check"  # "check" | "verify" | "preflight" (the quiet background check)


@dataclass
class JournalRead(Reading):
    """The journal's latest records for one phase (None: all phases)."""

    phase_id: str | None
    records: list[dict[str, Any]]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, JournalRead) and message.phase_id == self.phase_id


@dataclass
class ActionFailed(Message):
    """An operator's action that ended without doing what was asked (not a failed worker:
    the stop of a run that was restarted meanwhile); the text says why."""

    text: str


@dataclass
class StartOutcome(Message):
    """A step of the start flow done in a worker. `launched`: the step ran the checks and
    the start (else it only asked the questions; None then means there are none left).
    `error`: what went wrong when the step raised instead."""

    request: StartRequest
    result: StartResult | None
    launched: bool
    error: str | None = None


class StartsChanged(Message):
    """A start began or landed: the phase list draws `StartFlow.starting` again."""


@dataclass
class StartChecked(Message):
    """A start ran the phase's pre-flight checks (they failed, or passed it on): the detail
    shows these results as the phase's latest checks."""

    phase_id: str
    results: list[CheckResult]


@dataclass
class StartLaunched(Message):
    """The phase runs: its status and log are worth a look now, not at the next poll."""

    phase_id: str


@dataclass
class StartsLanded(Message):
    """The operator quit while starts were in flight (`StartFlow.quit_when_landed`) and the
    last has now landed; `started`: those that launched, which keep running."""

    started: tuple[str, ...]
