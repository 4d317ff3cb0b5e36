"""The whole-run metric curves the train detail charts: bounded memory, the run's start
kept, bucket means that follow the loss, and what the live figures carry to the view."""

from __future__ import annotations

import math

from console.core.figures.curves import StepCurve
from console.core.lifecycle.livestats import LiveStats
from pipeline.events import Event


def test_a_week_long_run_keeps_its_first_steps_in_bounded_memory() -> None:
    curve = StepCurve(capacity=64)
    for step in range(1, 100_001):
        curve.append(step, 10.0 - step / 10_000)
    c = curve.frozen()
    assert c is not None
    assert 32 <= len(c.values) <= 64
    assert c.steps[0] <= 100_000 / 32  # the first bucket still covers the run's start
    assert c.last_step == 100_000 and c.points == 100_000
    assert c.low == 0.0 and c.high == 10.0 - 1 / 10_000
    # Bucket means sit on the line the loss followed, oldest first.
    assert all(a > b for a, b in zip(c.values, c.values[1:]))
    assert abs(c.values[0] - (10.0 - c.steps[0] / 20_000)) < 0.2


def test_bucket_means_smooth_the_noise_of_single_steps() -> None:
    curve = StepCurve(capacity=16)
    for step in range(1, 1025):
        curve.append(step, 2.0 + (1.0 if step % 2 else -1.0))
    c = curve.frozen()
    assert c is not None and len(c.values) == 16
    assert all(abs(v - 2.0) < 1e-9 for v in c.values)
    assert (c.low, c.high) == (1.0, 3.0)  # the label still says how far the noise went


def test_a_run_restarted_into_the_same_events_file_starts_its_curve_over() -> None:
    curve = StepCurve()
    for step in (10, 20, 30):
        curve.append(step, 5.0)
    curve.append(10, 1.0)
    c = curve.frozen()
    assert c is not None and c.steps == (10.0,) and c.values == (1.0,) and c.points == 1


def test_values_that_are_not_numbers_are_left_out() -> None:
    curve = StepCurve()
    assert curve.frozen() is None
    curve.append(1, math.nan)
    curve.append(2, math.inf)
    assert curve.frozen() is None
    curve.append(3, 0.5)
    c = curve.frozen()
    assert c is not None and c.values == (0.5,)


def _ev(t: float, kind: str, **fields) -> Event:  # type: ignore[no-untyped-def]
    return Event(t, kind, fields)


def test_live_figures_carry_the_curves_of_metrics_logged_with_a_step_and_the_artifacts() -> None:
    stats = LiveStats()
    stats.feed([_ev(1.0, "metric", name="loss", value=4.0, step=10),
                _ev(2.0, "metric", name="loss", value=3.0, step=20),
                _ev(2.0, "metric", name="val_acc_0", value=0.4, step=20),
                _ev(3.0, "metric", name="acceptance", value=2.4),  # no step: no curve
                _ev(4.0, "artifact", path="eval/acceptance.json", bytes=1200)])
    snap = stats.snapshot()
    assert set(snap.curves) == {"loss", "val_acc_0"}
    assert snap.curves["loss"].values == (4.0, 3.0) and snap.curves["loss"].last_step == 20
    assert snap.artifacts == ("eval/acceptance.json",)
    assert snap.metrics["acceptance"] == [2.4]
