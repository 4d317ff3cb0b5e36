"""CPU, memory and load of the host (the host line of the console)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from console.core.telemetry.samples import HostReading


def _busy_total(times: Any) -> tuple[float, float]:
    """(busy, total) CPU seconds; idle and iowait are not busy, guest time is already
    counted inside user/nice on Linux, so it is left out of the total (psutil does the same)."""
    total = sum(times)
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


class HostSource:
    """Reads host CPU %, memory and load average.

    Contract: `read() -> HostReading` never raises, never blocks (CPU % is the average since
    the previous read, from this object's own counters, so another caller of
    `psutil.cpu_percent` cannot skew it), and is thread-safe. The first read reports CPU
    since construction. `mem_used` is total minus available (what is really taken, page
    cache excluded); any part that cannot be read is None.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None
        self._cpus = os.cpu_count()
        self._pct: float | None = None
        try:
            self._last = _busy_total(psutil.cpu_times())
        except Exception:  # noqa: BLE001
            self._last = None

    def read(self) -> HostReading:
        t = self._clock()
        cpu = self._cpu()
        mem_used = mem_total = None
        try:
            vm = psutil.virtual_memory()
            mem_total = int(vm.total)
            mem_used = int(vm.total - vm.available)
        except Exception:  # noqa: BLE001
            pass
        load = None
        try:
            one, five, fifteen = os.getloadavg()
            load = (round(one, 2), round(five, 2), round(fifteen, 2))
        except Exception:  # noqa: BLE001 - not on every platform
            pass
        return HostReading(t=t, cpu_percent=cpu, mem_used=mem_used, mem_total=mem_total, load=load, cpu_count=self._cpus)

    def _cpu(self) -> float | None:
        try:
            now = _busy_total(psutil.cpu_times())
        except Exception:  # noqa: BLE001
            return None
        with self._lock:
            last = self._last
            if last is None:
                self._last = now
                return None
            d_total = now[1] - last[1]
            if d_total <= 0:
                return self._pct  # read twice within one kernel tick: nothing new to say
            self._last = now
            self._pct = round(max(0.0, min(100.0, 100.0 * (now[0] - last[0]) / d_total)), 1)
            return self._pct
