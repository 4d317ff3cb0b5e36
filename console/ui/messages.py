"""Typed messages the thread workers post to the UI. Each carries plain data already
computed off the UI loop, so a handler only stores it and refreshes a widget."""

from __future__ import annotations

from typing import Any

from textual.message import Message

from console.core.checks.result import CheckResult
from console.core.snapshot import SpaceNeed
from console.core.telemetry.history import VolumeForecast
from console.core.telemetry.samples import DiskReading, GpuReading, HostReading, ShmReading


class GpuUpdated(Message):
    def __init__(self, reading: GpuReading, owners: dict[int, str]) -> None:
        super().__init__()
        self.reading = reading
        self.owners = owners  # pid -> phase id


class DiskUpdated(Message):
    def __init__(self, reading: DiskReading, forecasts: dict[str, VolumeForecast],
                 needs: dict[str, SpaceNeed]) -> None:
        super().__init__()
        self.reading = reading
        self.forecasts = forecasts
        self.needs = needs


class ShmUpdated(Message):
    def __init__(self, reading: ShmReading) -> None:
        super().__init__()
        self.reading = reading


class HostUpdated(Message):
    def __init__(self, reading: HostReading) -> None:
        super().__init__()
        self.reading = reading


class LogLines(Message):
    """New lines of a log. `reset` means a different file (or the first read): replace."""

    def __init__(self, key: str, lines: list[str], partial: str, reset: bool, path: str | None) -> None:
        super().__init__()
        self.key = key
        self.lines = lines
        self.partial = partial
        self.reset = reset
        self.path = path


class ChecksDone(Message):
    def __init__(self, phase_id: str, results: list[CheckResult], kind: str = "check") -> None:
        super().__init__()
        self.phase_id = phase_id
        self.results = results
        self.kind = kind  # "check" | "verify" | "preflight" (the quiet background check)


class JournalRead(Message):
    def __init__(self, phase_id: str | None, records: list[dict[str, Any]]) -> None:
        super().__init__()
        self.phase_id = phase_id
        self.records = records
