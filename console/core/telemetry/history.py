"""Short histories of readings: sparklines, rates, and the disk-full forecast.

The panels poll every second or two; what an operator needs is the trend (is the GPU busy,
how fast is the disk filling, will the rest of the extraction fit), so readings are kept in
small ring buffers bounded by count and age, and rates are fitted over a window rather than
taken from the last two noisy points.
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from console.core.telemetry.samples import DiskReading, GpuReading


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares change per unit of t; None with fewer than two distinct times."""
    n = len(points)
    if n < 2:
        return None
    mt = sum(p[0] for p in points) / n
    mv = sum(p[1] for p in points) / n
    den = sum((p[0] - mt) ** 2 for p in points)
    if den <= 0:
        return None
    return sum((p[0] - mt) * (p[1] - mv) for p in points) / den


def median_rate(points: Sequence[tuple[float, float]]) -> float | None:
    """The median of the per-interval rates between successive points; None with fewer
    than two distinct times."""
    rates = sorted((b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(points, points[1:]) if b[0] > a[0])
    if not rates:
        return None
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


class Series:
    """A ring buffer of (t, value) points.

    Contract: at most `maxlen` points; with `max_age` set, points older than the newest
    point's t minus `max_age` are dropped on append. Points are appended in time order (a
    point older than the newest one is ignored: readings from a stalled worker arriving late
    must not bend the curve). Thread-safe: one writer and any readers; readers get copies.
    `values()` feeds a sparkline; `rate(window)` is the least-squares slope per second over
    the last `window` seconds (default: everything kept), None until two distinct times.
    """

    def __init__(self, maxlen: int = 600, max_age: float | None = None) -> None:
        self.maxlen = maxlen
        self.max_age = max_age
        self._points: deque[tuple[float, float]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def append(self, t: float, value: float) -> None:
        with self._lock:
            if self._points and t < self._points[-1][0]:
                return
            self._points.append((float(t), float(value)))
            if self.max_age is not None:
                horizon = t - self.max_age
                while self._points and self._points[0][0] < horizon:
                    self._points.popleft()

    def replace_last(self, t: float, value: float) -> None:
        """Move the newest point to (t, value): a burst of readings counts as one point."""
        with self._lock:
            if not self._points:
                self._points.append((float(t), float(value)))
            elif t >= self._points[-1][0]:
                self._points[-1] = (float(t), float(value))

    def clear(self) -> None:
        with self._lock:
            self._points.clear()

    def points(self, window: float | None = None) -> list[tuple[float, float]]:
        with self._lock:
            pts = list(self._points)
        if window is not None and pts:
            horizon = pts[-1][0] - window
            pts = [p for p in pts if p[0] >= horizon]
        return pts

    def values(self, window: float | None = None) -> list[float]:
        return [v for _, v in self.points(window)]

    @property
    def last(self) -> tuple[float, float] | None:
        with self._lock:
            return self._points[-1] if self._points else None

    def rate(self, window: float | None = None) -> float | None:
        return slope(self.points(window))

    def __len__(self) -> int:
        return len(self._points)


class GpuHistory:
    """Per-GPU utilization over the last `seconds`, for the GPU panel's sparklines.

    Contract: `add(reading)` with each `GpuReading` (an error reading or a GPU whose
    utilization is None adds nothing for it, so an N/A GPU shows an empty sparkline rather
    than a fake zero). `utilization(index) -> list[float]` oldest first, percent 0..100;
    an unknown index gives []. `series(index)` gives the underlying `Series`. Thread-safe.
    """

    def __init__(self, seconds: float = 60.0, maxlen: int = 600) -> None:
        self.seconds = seconds
        self.maxlen = maxlen
        self._series: dict[int, Series] = {}
        self._lock = threading.Lock()

    def add(self, reading: GpuReading) -> None:
        for gpu in reading.gpus:
            if gpu.utilization is None:
                continue
            self.series(gpu.index).append(reading.t, gpu.utilization)

    def series(self, index: int) -> Series:
        with self._lock:
            s = self._series.get(index)
            if s is None:
                s = self._series[index] = Series(self.maxlen, max_age=self.seconds)
            return s

    def utilization(self, index: int) -> list[float]:
        with self._lock:
            s = self._series.get(index)
        return s.values() if s is not None else []

    def indexes(self) -> list[int]:
        with self._lock:
            return sorted(self._series)


FILLING_B_PER_S = 1000.0  # slower than this a volume is idle, not filling (the panel says so)


@dataclass(frozen=True)
class VolumeForecast:
    """Where one volume is heading. `rate` is bytes/s (negative while space is freed), None
    until two readings (or when they make no number); `time_to_full` is seconds until `free`
    reaches 0 at that rate, only while the volume is filling (at least `FILLING_B_PER_S`),
    else None: never negative, never infinite."""

    path: str
    free: int | None
    total: int | None
    rate: float | None
    time_to_full: float | None
    error: str | None = None

    def will_fit(self, remaining_bytes: float, reserve_bytes: float = 0) -> bool | None:
        """Whether `remaining_bytes` more fit in what is free now, keeping `reserve_bytes`
        spare; None when the free space is unknown."""
        if self.free is None:
            return None
        return remaining_bytes + reserve_bytes <= self.free


class DiskForecast:
    """Write rate and time-to-full per volume from successive `DiskReading`s.

    Contract: `update(reading)` with each reading (thread-safe; readings of a volume with an
    error are skipped for the rate but keep the error visible). The rate is the median of the
    rates between successive readings over the last `window_s` seconds (60 s): a writer that
    flushes in chunks averages out, and one step (a `clean` freeing 222 MB while extraction
    writes 20 MB/s) does not turn the figure negative for a minute, as a slope or a plain
    difference would. Two readings are enough for a first figure. `volume(path)` gives
    a `VolumeForecast` (None for a path never seen); `rate`, `time_to_full`, `will_fit` are
    shortcuts by path; `forecasts()` lists every volume in the order first seen.
    `volume_for(path)` names the configured volume holding a file path (longest matching
    prefix), to check a phase's remaining bytes against the volume its outputs land on.
    """

    def __init__(self, window_s: float = 60.0, maxlen: int = 256) -> None:
        self.window_s = window_s
        self.maxlen = maxlen
        self._used: dict[str, Series] = {}
        self._last: dict[str, tuple[int | None, int | None, str | None]] = {}
        self._lock = threading.Lock()

    def update(self, reading: DiskReading) -> None:
        with self._lock:
            for vol in reading.volumes:
                s = self._used.get(vol.path)
                if s is None:
                    s = self._used[vol.path] = Series(self.maxlen, max_age=self.window_s)
                self._last[vol.path] = (vol.free, vol.total, vol.error)
                if vol.error is None and vol.used is not None:
                    s.append(reading.t, vol.used)

    def feed(self, readings: Iterable[DiskReading]) -> None:
        for r in readings:
            self.update(r)

    def volume(self, path: str | os.PathLike[str]) -> VolumeForecast | None:
        key = os.fspath(path)
        with self._lock:
            s = self._used.get(key)
            last = self._last.get(key)
        if s is None or last is None:
            return None
        free, total, error = last
        rate = median_rate(s.points())
        if rate is not None and not math.isfinite(rate):
            rate = None
        filling = rate is not None and rate >= FILLING_B_PER_S
        ttf = max(0.0, free / rate) if filling and free is not None and rate else None
        return VolumeForecast(key, free, total, rate, ttf, error)

    def forecasts(self) -> list[VolumeForecast]:
        with self._lock:
            keys = list(self._used)
        return [f for f in (self.volume(k) for k in keys) if f is not None]

    def rate(self, path: str | os.PathLike[str]) -> float | None:
        f = self.volume(path)
        return f.rate if f else None

    def time_to_full(self, path: str | os.PathLike[str]) -> float | None:
        f = self.volume(path)
        return f.time_to_full if f else None

    def will_fit(self, path: str | os.PathLike[str], remaining_bytes: float, reserve_bytes: float = 0) -> bool | None:
        f = self.volume(path)
        return f.will_fit(remaining_bytes, reserve_bytes) if f else None

    def volume_for(self, path: str | os.PathLike[str]) -> str | None:
        target = os.path.abspath(os.fspath(path))
        with self._lock:
            keys = list(self._used)
        best = None
        for k in keys:
            root = os.path.abspath(k)
            if ((target == root or target.startswith(root.rstrip(os.sep) + os.sep))
                    and (best is None or len(root) > len(os.path.abspath(best)))):
                best = k
        return best
