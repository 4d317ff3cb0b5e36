"""Live progress of a running phase, derived from its events file (docs/internals.md, "Events protocol").

Phases report raw counters (done/total, bytes, tokens, metrics); rates and ETAs are derived
here over a sliding window of the events' own timestamps, so a console that attaches late or
polls irregularly computes the same figures as one that watched from the start.
"""

from __future__ import annotations

import math
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from console.core.figures.curves import Curve, StepCurve
from console.core.telemetry.history import Series, slope
from console.core.text.terminal_text import one_line
from pipeline.events import Event, read_events

MAX_METRICS = 64  # distinct metric names kept: a chatty phase cannot grow the console without end
METRIC_POINTS = 500
ARTIFACTS_KEPT = 8  # newest artifact paths a view may look in (the evaluate report)
RESTART_FRACTION = 0.9  # `done` falling below this share of the last one is a new run
BURST_S = 1.0  # progress events this close together are one point of the rate (a batch's prompts)
MIN_POINTS = 4  # the rate spans at least this many points, however far apart they are
SMOOTH_POINTS = 20  # a batch loss reads as the mean of the last this many


@dataclass(frozen=True)
class Message:
    t: float
    level: str
    text: str


@dataclass(frozen=True)
class LiveSnapshot:
    """Every figure at one instant, for a view refreshed from another thread."""

    done: float | None
    total: float | None
    unit: str | None
    fraction: float | None
    rate: float | None
    eta_s: float | None
    bytes_written: int | None
    tokens_per_s: float | None
    remaining_bytes: int | None
    last_progress_t: float | None
    last_message: Message | None
    metrics: dict[str, list[float]] = field(default_factory=dict)
    curves: dict[str, Curve] = field(default_factory=dict)  # metrics logged with a step, whole run
    artifacts: tuple[str, ...] = ()  # newest last
    ended: bool = False  # the run is over: its figures describe what it did, no rate or ETA
    failed: float | None = None  # units counted in `done` that failed (progress extra `failed`)
    warnings: int = 0  # message events of level `warning` (pipeline.events.warn), the whole run

    @property
    def estimating(self) -> bool:
        """Running with units left and no measured rate yet: the ETA is still to come."""
        return (not self.ended and self.eta_s is None and self.done is not None
                and self.total is not None and self.done < self.total)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x == x and x not in (float("inf"), float("-inf")) else None


class LiveStats:
    """Folds a phase's events into the figures of its progress line.

    Contract (every property None when the events do not tell):
    - `feed(events)`: progress, metric, artifact and message events; other kinds ignored;
      malformed fields ignored, never raised. A progress `done` below 90 % of the previous one
      (a restarted run writing to the same file) restarts the rate window; one slightly lower
      (another rank's lagging tally) is ignored.
    - `done`, `total`, `unit`, `fraction` (done/total clamped to 0..1): the latest progress.
    - `rate`: units per second, least-squares over the last `window_s` seconds of progress
      events' `t`, widened to the last `MIN_POINTS` points when fewer fall in it (a phase
      that reports every few minutes gets its ETA from its own cadence), from the first unit of work on: points still at the first `done` seen
      (model loading, a resumed run's starting count) are left out, and events within
      `BURST_S` of a point's first event are one point (its latest count), so a batch that
      reports its items a millisecond apart is not thousands a second. Until a second such
      point comes, the rate is the first interval's: from the last event still at the
      starting count to the first point past it (a train reporting every 10 steps has its
      rate at step 20, not 30); None before that. `eta_s`: (total - done) / rate when
      rate > 0, else None (the view says "estimating…").
    - `bytes_written`: the latest progress extra `bytes_written` if the phase ever sent one,
      else the sum of artifact `bytes`.
    - `tokens_per_s`: the latest progress extra `tokens_per_s`, else the rate of the
      cumulative progress extra `tokens` over the window (from its first interval on, as
      the rate).
    - `remaining_bytes`: the latest progress extra `bytes_remaining`, else the bytes written
      per unit since the first progress event times the units left; None while no bytes
      were written alongside the units (a phase whose files came before its steps), so
      "to go" never shrinks while "written" stands still.
    - `metrics`: {name: Series of (t, value)} for metric events (loss, lr, ...), the last
      500 points each; `curves`: {name: `StepCurve`} of the metric events that carry a
      `step`, the whole run in bounded memory (console/core/figures/curves.py), for the charts;
      `artifacts`: the paths of the last 8 artifact events; `last_message`: the newest `Message`; `messages`: the last 50;
      `warnings`: how many messages of level `warning` came, the whole run.
    - `last_progress_t`: the `t` of the newest progress event (a view can flag a stall).
    - `failed`: the latest progress extra `failed` (units counted in `done` that failed).
    - Thread-safe: one feeder and any readers; `snapshot()` gives a consistent copy.
    """

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._lock = threading.RLock()
        self._done: float | None = None
        self._total: float | None = None
        self._unit: str | None = None
        self._progress = Series(maxlen=256)  # at most one point a second (BURST_S)
        self._tokens = Series(maxlen=256)
        self._failed: float | None = None
        self._base: tuple[float, float] | None = None  # (done, bytes written) at the first progress
        self._base_tokens: float | None = None
        self._start: tuple[float, float] | None = None  # (t, done): the last event at the starting count
        self._start_tokens: tuple[float, float] | None = None
        self._burst_t0 = float("-inf")  # when the rate's newest point began
        self._last_progress_t: float | None = None
        self._reported_bytes: float | None = None
        self._artifact_bytes = 0
        self._artifacts = 0
        self._tokens_per_s: float | None = None
        self._bytes_remaining: float | None = None
        self.metrics: dict[str, Series] = {}
        self.curves: dict[str, StepCurve] = {}
        self.artifacts: deque[str] = deque(maxlen=ARTIFACTS_KEPT)
        self.messages: deque[Message] = deque(maxlen=50)
        self.warnings = 0

    def feed(self, events: Iterable[Event]) -> None:
        with self._lock:
            for ev in events:
                try:
                    handler = getattr(self, f"_on_{ev.kind}", None)
                    if handler is not None:
                        handler(ev)
                except Exception:  # noqa: BLE001 - one odd event must not stop the view
                    continue

    def _on_progress(self, ev: Event) -> None:
        done = _num(ev.get("done"))
        if done is None:
            return
        if self._done is not None and done < self._done:
            if done >= RESTART_FRACTION * self._done:
                # A rank whose tally lags another's (sharded runs report one global count from
                # each rank): not a restart. Taking it would put two points a few ms apart,
                # 10 samples apart, into the fit: thousands of samples a second.
                return
            self._progress.clear()
            self._tokens.clear()
            self._base = None
            self._base_tokens = None
            self._start = self._start_tokens = None
            self._burst_t0 = float("-inf")
        self._done = done
        total = _num(ev.get("total"))
        self._total = total if total is not None and total > 0 else None
        unit = ev.get("unit")
        self._unit = one_line(str(unit))[:40] if unit is not None else self._unit
        self._last_progress_t = ev.t
        if (b := _num(ev.get("bytes_written"))) is not None:
            self._reported_bytes = b
        failed = _num(ev.get("failed"))
        self._failed = failed if failed is not None and failed >= 0 else self._failed
        if self._base is None:
            self._base = (done, float(self.bytes_written or 0))
        burst = ev.t - self._burst_t0 < BURST_S
        if done <= self._base[0]:
            self._start = (ev.t, done)
        elif burst:
            self._progress.replace_last(ev.t, done)
        else:
            self._progress.append(ev.t, done)
        if (tps := _num(ev.get("tokens_per_s"))) is not None:
            self._tokens_per_s = tps
        if (tok := _num(ev.get("tokens"))) is not None:
            if self._base_tokens is None:
                self._base_tokens = tok
            if tok <= self._base_tokens:
                self._start_tokens = (ev.t, tok)
            elif burst:
                self._tokens.replace_last(ev.t, tok)
            else:
                self._tokens.append(ev.t, tok)
        if not burst:
            self._burst_t0 = ev.t
        rem = _num(ev.get("bytes_remaining"))
        self._bytes_remaining = rem if rem is not None and rem >= 0 else None

    def _on_metric(self, ev: Event) -> None:
        name = ev.get("name")
        value = _num(ev.get("value"))
        if not isinstance(name, str) or value is None:
            return
        name = one_line(name)[:40]
        series = self.metrics.get(name)
        if series is None:
            if len(self.metrics) >= MAX_METRICS:
                return
            series = self.metrics[name] = Series(maxlen=METRIC_POINTS)
        series.append(ev.t, value)
        if (step := _num(ev.get("step"))) is not None:
            self.curves.setdefault(name, StepCurve()).append(step, value)

    def _on_artifact(self, ev: Event) -> None:
        self._artifacts += 1
        if isinstance(path := ev.get("path"), str):
            self.artifacts.append(path)
        b = _num(ev.get("bytes"))
        if b is not None and b > 0:
            self._artifact_bytes += int(b)

    def _on_message(self, ev: Event) -> None:
        if ev.get("level") == "warning":
            self.warnings += 1
        self.messages.append(Message(ev.t, one_line(str(ev.get("level", "info")))[:16], one_line(str(ev.get("text", "")))))

    @property
    def done(self) -> float | None:
        return self._done

    @property
    def total(self) -> float | None:
        return self._total

    @property
    def unit(self) -> str | None:
        return self._unit

    @property
    def fraction(self) -> float | None:
        with self._lock:
            if self._done is None or not self._total:
                return None
            return max(0.0, min(1.0, self._done / self._total))

    @property
    def rate(self) -> float | None:
        return cadence_rate(self._progress, self.window_s, self._start)

    @property
    def eta_s(self) -> float | None:
        with self._lock:
            rate = self.rate
            if rate is None or rate <= 0 or self._total is None or self._done is None:
                return None
            return max(0.0, (self._total - self._done) / rate)

    @property
    def bytes_written(self) -> int | None:
        with self._lock:
            if self._reported_bytes is not None:
                return int(self._reported_bytes)
            return self._artifact_bytes if self._artifacts else None

    @property
    def tokens_per_s(self) -> float | None:
        with self._lock:
            if self._tokens_per_s is not None:
                return self._tokens_per_s
            return cadence_rate(self._tokens, self.window_s, self._start_tokens)

    @property
    def remaining_bytes(self) -> int | None:
        with self._lock:
            if self._bytes_remaining is not None:
                return int(self._bytes_remaining)
            written = self.bytes_written
            if written is None or self._base is None or self._done is None or self._total is None:
                return None
            units = self._done - self._base[0]
            grew = written - self._base[1]
            if units <= 0 or grew <= 0:
                return None
            return int(max(0.0, grew / units * (self._total - self._done)))

    @property
    def last_progress_t(self) -> float | None:
        return self._last_progress_t

    @property
    def last_message(self) -> Message | None:
        with self._lock:
            return self.messages[-1] if self.messages else None

    def snapshot(self) -> LiveSnapshot:
        with self._lock:
            return LiveSnapshot(
                done=self.done,
                total=self.total,
                unit=self.unit,
                fraction=self.fraction,
                rate=self.rate,
                eta_s=self.eta_s,
                bytes_written=self.bytes_written,
                tokens_per_s=self.tokens_per_s,
                remaining_bytes=self.remaining_bytes,
                last_progress_t=self.last_progress_t,
                last_message=self.last_message,
                metrics={k: s.values() for k, s in self.metrics.items()},
                curves={k: c for k, s in self.curves.items() if (c := s.frozen()) is not None},
                artifacts=tuple(self.artifacts),
                failed=self._failed,
                warnings=self.warnings,
            )


def cadence_rate(series: Series, window_s: float, start: tuple[float, float] | None = None) -> float | None:
    """The slope over the last `window_s` seconds, or over the last `MIN_POINTS` points
    when fewer fall in that window; with one point only, the slope from `start` (the last
    event at the starting count) to it: the first interval, once it spans a burst's `BURST_S`."""
    pts = series.points()
    if len(pts) == 1 and start is not None:
        rate = slope([start, pts[0]]) if pts[0][0] - start[0] >= BURST_S else None
    else:
        recent = [p for p in pts if p[0] >= pts[-1][0] - window_s] if pts else []
        if len(recent) < MIN_POINTS:
            recent = pts[-MIN_POINTS:]
        rate = slope(recent)
    return rate if rate is not None and math.isfinite(rate) else None


@dataclass(frozen=True)
class MetricFigure:
    label: str  # what the view prints: the name and the figure an operator should read
    values: list[float]  # every point, for a sparkline
    name: str = ""  # the metric's own name


def headline_metrics(metrics: dict[str, list[float]]) -> list[MetricFigure]:
    """The metrics in the order a view shows them: the training loss first, as the mean
    of its last `SMOOTH_POINTS` batches (one batch swings from 1.2 to 5.0), labelled as the
    mean it is (`avg loss 3.34 (last 18)`: a chart's `loss` is its newest batch), then the
    last validation loss beside it, then the others with their last value."""
    def rank(name: str) -> int:
        return 0 if name == "loss" else 1 if name == "val_loss" else 2

    out = []
    for name in sorted((n for n, v in metrics.items() if v), key=rank):
        values = metrics[name]
        if name == "loss" and len(values) > 1:
            tail = values[-SMOOTH_POINTS:]
            label = f"avg loss {sum(tail) / len(tail):.3g} (last {len(tail)})"
        else:
            label = f"{name} {values[-1]:.4g}"
        out.append(MetricFigure(label, values, name))
    return out


class EventTail:
    """Follows one events.jsonl and feeds a `LiveStats`.

    Contract: `poll() -> list[Event]` returns the events appended since the last poll (a line
    still being written waits for the next poll) and feeds them to `stats`. Never raises: a
    missing file gives []. A file that shrank below the saved offset (a new run reusing the
    path) is read again from the start into a fresh `stats`. Thread-safe for one poller.
    Reads use `pipeline.events.read_events`: at most about 1 MiB parsed a poll, over-long
    lines skipped once (never re-read), a hostile line ignored, an event's `t` clamped to
    the file's last write (`clamp_times`).
    """

    def __init__(self, path: str | os.PathLike[str], stats: LiveStats | None = None, window_s: float = 30.0) -> None:
        self.path = os.fspath(path)
        self.window_s = window_s
        self.stats = stats if stats is not None else LiveStats(window_s)
        self.offset = 0
        self._lock = threading.Lock()

    def poll(self) -> list[Event]:
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError:
                return []
            if not stat.S_ISREG(st.st_mode):
                return []  # a FIFO or a device put in its place: opening it could block the poller for ever
            size = st.st_size
            if size < self.offset:
                self.offset = 0
                self.stats = LiveStats(self.window_s)
            try:
                events, self.offset = read_events(self.path, self.offset)
                written = os.stat(self.path).st_mtime  # after the read: no line read was written later
            except Exception:  # noqa: BLE001 - unreadable now; try again next poll
                return []
            events = clamp_times(events, min(time.time(), written))
            self.stats.feed(events)
            return events


def clamp_times(events: list[Event], now: float) -> list[Event]:
    """Each event's `t` no later than `now`: the file's last write (its mtime, read after the
    events were), or the time they were read when that is earlier (an mtime ahead of the clock).
    A phase that stamps its events in milliseconds (or from a clock set ahead) would otherwise
    seem to have spoken in the future and silence the stall alert for the rest of the run; and
    the file's mtime, unlike the time a reader came by, is the same for every reader, so a
    one-shot `eagle3 status` sees the silence a console watching since the start sees."""
    return [e if math.isfinite(e.t) and e.t <= now else replace(e, t=now) for e in events]
