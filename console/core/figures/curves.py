"""A metric over a whole run in bounded memory: what the train detail's loss and val acc_0
charts draw.

A training run logs its loss every few steps for days; the chart wants the whole run at
once, squeezed into at most a screen's width. `StepCurve` keeps at most `capacity` buckets
and, when full, merges neighbours in pairs, so the run's start stays on the chart while
memory stays fixed. A bucket holds the mean of its points: a loss curve read this way is
smoothed rather than decimated, and one noisy step cannot dominate a cell.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

CAPACITY = 256  # buckets: wider than any chart a terminal gives one metric


@dataclass(frozen=True)
class Curve:
    """A frozen copy for a view: bucket means oldest first, and the figures a label shows."""

    steps: tuple[float, ...]  # the last step of each bucket
    values: tuple[float, ...]
    last: float  # the newest point as logged, not its bucket's mean
    last_step: float
    low: float  # over every point seen, not only the buckets' means
    high: float
    points: int  # how many points the run logged


class StepCurve:
    """Contract: `append(step, value)` in step order; a step below the newest one starts the
    curve over (a run restarted into the same events file), equal steps are kept. A
    non-finite value is ignored. At most `capacity` buckets (even, >= 2) are held; each
    covers `stride` points, the stride doubling whenever the buckets fill. `frozen()` is
    None before the first point, and is cached until the next append. Thread-safe: one
    writer and any readers."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 2 or capacity % 2:
            raise ValueError(f"capacity must be even and at least 2, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._steps: list[float] = []
        self._sums: list[float] = []
        self._counts: list[int] = []
        self.stride = 1
        self._last = self._last_step = 0.0
        self._low, self._high = math.inf, -math.inf
        self._points = 0
        self._frozen: Curve | None = None

    def append(self, step: float, value: float) -> None:
        if not math.isfinite(value) or not math.isfinite(step):
            return
        with self._lock:
            if self._points and step < self._last_step:
                self._reset()
            self._frozen = None
            self._points += 1
            self._last, self._last_step = value, step
            self._low, self._high = min(self._low, value), max(self._high, value)
            if self._counts and self._counts[-1] < self.stride:
                self._steps[-1] = step
                self._sums[-1] += value
                self._counts[-1] += 1
                return
            if len(self._counts) == self.capacity:
                self._halve()
            self._steps.append(step)
            self._sums.append(value)
            self._counts.append(1)

    def _halve(self) -> None:
        """Merge buckets pairwise: the curve keeps its whole span at half the resolution."""
        self._steps = self._steps[1::2]
        self._sums = [a + b for a, b in zip(self._sums[::2], self._sums[1::2])]
        self._counts = [a + b for a, b in zip(self._counts[::2], self._counts[1::2])]
        self.stride *= 2

    def frozen(self) -> Curve | None:
        with self._lock:
            if not self._points:
                return None
            if self._frozen is None:
                self._frozen = Curve(
                    steps=tuple(self._steps),
                    values=tuple(s / c for s, c in zip(self._sums, self._counts)),
                    last=self._last, last_step=self._last_step,
                    low=self._low, high=self._high, points=self._points)
            return self._frozen

    def __len__(self) -> int:
        return len(self._counts)
