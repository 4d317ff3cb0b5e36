"""The figures an operator reads must be honest: no fill time while space is freed, none in
the hundred-thousand days, no rate that counts model loading, no "ETA 1s" from one batch,
no "to go" that shrinks while "written" stands still. A seeded property test feeds the
formatters and forecasts random and adversarial series (zero, decreasing, huge, NaN)."""

from __future__ import annotations

import math
import random

import pytest

from console.core.lifecycle.livestats import LiveStats
from console.core.telemetry.history import DiskForecast
from console.core.telemetry.samples import DiskReading, VolumeSample
from console.core.text.durations import format_duration
from console.ui.render import fmt_bytes, fmt_pair, fmt_rate
from pipeline.events import Event

TB = 10**12


def _disk(t: float, used: float, free: float, path: str = "/dev/shm") -> DiskReading:
    return DiskReading(t, (VolumeSample(path, total=int(used + free) if math.isfinite(used + free) else None,
                                         used=used, free=free),))  # type: ignore[arg-type]


def _forecast(points: list[tuple[float, float, float]]):  # type: ignore[no-untyped-def]
    fc = DiskForecast()
    for t, used, free in points:
        fc.update(_disk(t, used, free))
    return fc.volume("/dev/shm")


def test_a_volume_barely_growing_has_no_fill_time_in_the_hundred_thousand_days() -> None:
    # /dev/shm with 500 GB free, growing by a few bytes a second (a lock file touched).
    f = _forecast([(t, 50e9 + 4 * t, 500e9 - 4 * t) for t in range(0, 60, 5)])
    assert f is not None and f.time_to_full is None
    assert format_duration(145086 * 86400 + 17 * 3600) == "> 1 y"


def test_a_volume_being_freed_shows_no_fill_time_and_no_negative_rate() -> None:
    from console.ui.components.machine.disk_panel import volume_line

    f = _forecast([(t, 900e9 - 51e6 * t, 100e9 + 51e6 * t) for t in range(0, 60, 5)])
    assert f is not None and f.rate is not None and f.rate < 0 and f.time_to_full is None
    for width in (30, 80):
        line = volume_line(_disk(60, 900e9 - 51e6 * 60, 100e9 + 51e6 * 60).volumes[0], f, width).plain
        assert "−" not in line and "-51" not in line and "full in" not in line, line
        assert "freeing" in line, line


def test_the_rate_starts_at_the_first_unit_of_work_not_at_model_loading() -> None:
    """A CPU run reports 0 done at start, loads its model for a minute, then does 1 a second."""
    st = LiveStats(window_s=120)
    events = [Event(0.0, "progress", {"done": 0, "total": 100, "tokens": 0})]
    events += [Event(60.0 + k, "progress", {"done": 1 + k, "total": 100, "tokens": 512 * (1 + k)})
               for k in range(10)]
    st.feed(events)
    assert st.rate == pytest.approx(1.0)
    assert st.tokens_per_s == pytest.approx(512.0)
    assert st.eta_s == pytest.approx(90.0)


def test_one_batch_reported_at_once_is_one_point_not_eta_1s() -> None:
    """evaluate reports 5 of 16 prompts a millisecond apart after a 4 s batch: the rate is the
    first interval's (5 in 4 s), not 5 in the batch's few milliseconds."""
    st = LiveStats()
    st.feed([Event(0.0, "progress", {"done": 0, "total": 16, "unit": "prompts"})])
    st.feed([Event(4.0 + k / 1000, "progress", {"done": 1 + k, "total": 16, "unit": "prompts"}) for k in range(5)])
    snap = st.snapshot()
    assert snap.rate == pytest.approx(5 / 4, rel=0.01) and snap.eta_s == pytest.approx(11 / (5 / 4), rel=0.01)
    st.feed([Event(8.0 + k / 1000, "progress", {"done": 6 + k, "total": 16, "unit": "prompts"}) for k in range(5)])
    assert st.rate == pytest.approx(5 / 4, rel=0.01)  # one batch of 5 every 4 s
    assert st.eta_s == pytest.approx(6 / (5 / 4), rel=0.01)


def test_to_go_does_not_shrink_while_written_stands_still() -> None:
    """demo-assets writes its datasets and tokenizer (1.2 MB), then trains for 200 steps."""
    st = LiveStats()
    st.feed([Event(0.0, "artifact", {"path": "raw", "bytes": 1_000_000}),
             Event(1.0, "artifact", {"path": "tokenizer", "bytes": 200_000})])
    st.feed([Event(2.0 + k, "progress", {"done": k, "total": 200, "unit": "steps"}) for k in range(1, 80)])
    assert st.bytes_written == 1_200_000
    assert st.remaining_bytes is None


def test_an_ended_run_is_not_estimating() -> None:
    from dataclasses import replace

    st = LiveStats()
    st.feed([Event(0.0, "progress", {"done": 3, "total": 10})])
    assert st.snapshot().estimating
    assert not replace(st.snapshot(), ended=True).estimating


ADVERSARIAL = [
    [0.0] * 20,
    [float(1000 - k) for k in range(20)],  # decreasing
    [1e30 * k for k in range(20)],  # huge
    [float("nan")] * 5 + [float(k) for k in range(10)],
    [float("inf"), 1.0, 2.0, float("-inf"), 3.0],
    [1.0, float("nan"), 2.0, 1e308, -1e308, 0.0],
    [-5.0, -10.0, -20.0],
]


def _series(rng: random.Random) -> list[float]:
    kind = rng.randrange(4)
    n = rng.randrange(0, 40)
    if kind == 0:
        return [rng.uniform(-1e12, 1e12) for _ in range(n)]
    if kind == 1:
        x = rng.uniform(0, 1e15)
        out = []
        for _ in range(n):
            x += rng.choice([0, 0, 1, -1]) * rng.uniform(0, 1e10)
            out.append(x)
        return out
    if kind == 2:
        return [rng.choice([0.0, float("nan"), 1e300, -1e300, 1.0, float("inf")]) for _ in range(n)]
    return sorted(rng.uniform(0, 1e9) for _ in range(n))


def _honest_text(text: str, limit: int) -> None:
    assert isinstance(text, str) and len(text) <= limit, text
    low = text.lower()
    assert "nan" not in low and "inf" not in low, text


def test_formatters_and_forecasts_stay_honest_on_random_and_adversarial_series() -> None:
    rng = random.Random(17)
    series = ADVERSARIAL + [_series(rng) for _ in range(300)]
    for values in series:
        for v in values:
            _honest_text(format_duration(v), 8)
            assert not format_duration(v).startswith("-")
            _honest_text(fmt_rate(v), 10)
            _honest_text(fmt_bytes(v), 10)
            _honest_text(fmt_pair(v, abs(v)), 20)
        # The same numbers as a volume's used bytes (free falling as used grows).
        cap = 2 * TB
        f = _forecast([(float(t), u, cap - u if math.isfinite(u) else float("nan")) for t, u in enumerate(values)])
        if f is not None:
            if f.rate is not None:
                assert math.isfinite(f.rate)
            if f.time_to_full is not None:
                assert math.isfinite(f.time_to_full) and f.time_to_full >= 0
                assert f.rate is not None and f.rate > 0
            _honest_text(format_duration(f.time_to_full), 8)
        # And as a phase's progress counter, with times that may repeat or jump.
        st = LiveStats()
        t = 0.0
        for v in values:
            t += rng.choice([0.0, 0.001, 1.0, 30.0])
            st.feed([Event(t, "progress", {"done": v, "total": 1000, "bytes_written": abs(v) if math.isfinite(v) else v,
                                           "tokens": v})])
        snap = st.snapshot()
        if snap.fraction is not None:
            assert 0.0 <= snap.fraction <= 1.0
        if snap.eta_s is not None:
            assert math.isfinite(snap.eta_s) and snap.eta_s >= 0
        if snap.remaining_bytes is not None:
            assert snap.remaining_bytes >= 0
        if snap.rate is not None:
            assert math.isfinite(snap.rate)
        _honest_text(format_duration(snap.eta_s), 8)
        _honest_text(fmt_rate(snap.rate), 10)
