"""LiveStats from synthetic events files: progress, rates, ETA, bytes, tokens, metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from console.core.lifecycle.livestats import EventTail, LiveStats, headline_metrics
from console.core.text.rates import format_rate
from pipeline.events import Event, EventWriter


def write(path: Path, *records: dict) -> None:
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def progress(t: float, done: float, total: float | None = 1000, **extra) -> dict:
    return {"t": t, "kind": "progress", "done": done, "total": total, "unit": "samples", **extra}


def test_progress_rate_eta_from_event_times(tmp_path):
    ev = tmp_path / "events.jsonl"
    write(ev, *(progress(100.0 + s, 10 * s) for s in range(0, 21)))  # 10 samples/s
    tail = EventTail(ev)
    assert len(tail.poll()) == 21
    st = tail.stats
    assert (st.done, st.total, st.unit) == (200, 1000, "samples")
    assert st.fraction == pytest.approx(0.2)
    assert st.rate == pytest.approx(10.0)
    assert st.eta_s == pytest.approx(80.0)
    assert st.last_progress_t == 120.0


def test_rate_uses_only_the_window(tmp_path):
    st = LiveStats(window_s=10)
    events = [Event(float(t), "progress", {"done": t * 100, "total": 10_000}) for t in range(0, 50)]
    events += [Event(float(t), "progress", {"done": 4900 + (t - 49) * 5, "total": 10_000}) for t in range(50, 71)]
    st.feed(events)
    assert st.rate == pytest.approx(5.0)  # the slowdown shows, not the old average


def test_bytes_written_and_remaining_estimated_from_artifacts(tmp_path):
    ev = tmp_path / "events.jsonl"
    write(ev, progress(0, 0, 100))
    for i in range(25):
        write(ev, {"t": i + 1, "kind": "artifact", "path": f"rows_0/{i}.safetensors", "bytes": 4_000_000})
    write(ev, progress(26, 25, 100))
    tail = EventTail(ev)
    tail.poll()
    assert tail.stats.bytes_written == 100_000_000
    assert tail.stats.remaining_bytes == 300_000_000  # 4 MB per sample, 75 to go


def test_reported_bytes_and_remaining_win_over_estimates():
    st = LiveStats()
    st.feed([
        Event(0, "artifact", {"path": "a", "bytes": 5}),
        Event(1, "progress", {"done": 10, "total": 20, "bytes_written": 1000, "bytes_remaining": 7777}),
    ])
    assert st.bytes_written == 1000 and st.remaining_bytes == 7777


def test_tokens_per_second_reported_or_derived():
    st = LiveStats()
    st.feed([Event(float(t), "progress", {"done": t, "total": 100, "tokens": t * 2048}) for t in range(10)])
    assert st.tokens_per_s == pytest.approx(2048.0)
    st.feed([Event(10.0, "progress", {"done": 10, "total": 100, "tokens_per_s": 999.5})])
    assert st.tokens_per_s == 999.5


def test_metrics_become_series_and_messages_are_kept():
    st = LiveStats()
    st.feed([Event(float(s), "metric", {"name": "loss", "value": 5.0 / (s + 1), "step": s}) for s in range(600)])
    st.feed([Event(601.0, "metric", {"name": "lr", "value": 1e-4}),
             Event(602.0, "message", {"level": "warning", "text": "disk is slow"})])
    loss = st.metrics["loss"].values()
    assert len(loss) == 500 and loss[-1] == pytest.approx(5.0 / 600)
    assert st.metrics["lr"].values() == [1e-4]
    assert (st.last_message.level, st.last_message.text) == ("warning", "disk is slow")
    snap = st.snapshot()
    assert snap.metrics["lr"] == [1e-4] and snap.last_message.text == "disk is slow"


def test_nothing_known_reads_as_none_and_odd_events_are_ignored():
    st = LiveStats()
    assert (st.done, st.fraction, st.rate, st.eta_s, st.bytes_written, st.tokens_per_s, st.remaining_bytes) == (None,) * 7
    st.feed([Event(0, "progress", {"done": "lots"}), Event(0, "metric", {"name": 3, "value": 1}),
             Event(0, "artifact", {"bytes": "big"}), Event(0, "unknown-kind", {})])
    assert st.done is None and st.metrics == {}
    st.feed([Event(1, "progress", {"done": 5, "total": None})])
    assert st.done == 5 and st.fraction is None and st.eta_s is None


def test_restarted_counter_restarts_the_rate():
    st = LiveStats()
    st.feed([Event(float(t), "progress", {"done": 100 * t, "total": 10_000}) for t in range(10)])
    st.feed([Event(10.0 + t, "progress", {"done": 2 * t, "total": 10_000}) for t in range(5)])
    assert st.rate == pytest.approx(2.0)


def test_event_tail_is_incremental_and_waits_for_a_torn_line(tmp_path):
    ev = tmp_path / "events.jsonl"
    tail = EventTail(ev)
    assert tail.poll() == []  # not created yet
    with EventWriter(ev) as w:
        w.progress(1, 10)
    assert [e.get("done") for e in tail.poll()] == [1]
    with open(ev, "a") as f:
        f.write('{"t": 5, "kind": "progress", "done": 2, "tot')
    assert tail.poll() == []
    with open(ev, "a") as f:
        f.write('al": 10}\n')
    assert [e.get("done") for e in tail.poll()] == [2]
    assert tail.stats.done == 2


def test_event_tail_starts_over_when_the_file_is_replaced(tmp_path):
    ev = tmp_path / "events.jsonl"
    write(ev, *(progress(t, 100 + t) for t in range(50)))
    tail = EventTail(ev)
    tail.poll()
    ev.write_text(json.dumps(progress(0, 3, 10)) + "\n")
    tail.poll()
    assert tail.stats.done == 3 and tail.stats.total == 10


def _progress_event(t: float, done: int, total: int = 10_000, **extra):  # type: ignore[no-untyped-def]
    import json

    from pipeline.events import parse_line

    return parse_line(json.dumps({"t": t, "kind": "progress", "done": done, "total": total,
                                  "unit": "samples", **extra}))


def test_a_resumed_sharded_run_reports_its_own_rate_not_a_burst() -> None:
    """Two ranks resume at 2,556 done and report the global count every second, each from its
    own tally, one a little behind the other: 344 samples a second, not thousands."""
    stats = LiveStats()
    events = []
    for k in range(6):
        t = 1000.0 + k
        events.append(_progress_event(t, 2556 + 344 * k, rank=0))
        events.append(_progress_event(t + 0.01, 2556 + 344 * k - 7, rank=1))  # lagging tally
    stats.feed(events)
    assert stats.rate == pytest.approx(344, rel=0.02)
    assert stats.eta_s == pytest.approx((10_000 - (2556 + 344 * 5)) / 344, rel=0.02)


def test_a_new_run_in_the_same_file_restarts_the_rate() -> None:
    stats = LiveStats()
    stats.feed([_progress_event(1000.0 + k, 5000 + 100 * k) for k in range(5)])
    stats.feed([_progress_event(2000.0 + k, 10 * k) for k in range(5)])
    assert stats.done == 40 and stats.rate == pytest.approx(10)


def test_a_phase_cannot_put_bidi_overrides_or_escapes_on_the_console_through_its_events():
    st = LiveStats()
    st.feed([
        Event(0, "progress", {"done": 1, "total": 9, "unit": "sam\u202eples\x1b[2J"}),
        Event(1, "metric", {"name": "lo\u2066ss\x1b]0;pwned\x07", "value": 1.0}),
        Event(2, "message", {"level": "warn\u202eing", "text": "disk \u202efull\x1b[31m now"}),
    ])
    shown = [st.unit, *st.metrics, st.messages[-1].level, st.messages[-1].text]
    assert not any(c in s for s in shown for c in ("\u202e", "\u2066", "\x1b", "\x07"))
    assert st.messages[-1].text.startswith("disk full")


def test_a_phase_inventing_metric_names_cannot_grow_the_console_without_bound():
    st = LiveStats()
    st.feed([Event(i, "metric", {"name": f"m{i}", "value": 1.0}) for i in range(10_000)])
    assert len(st.metrics) <= 64


def test_an_event_stamped_in_milliseconds_cannot_silence_the_stall_alert(tmp_path):
    from console.core.lifecycle.stall import silence

    ev = tmp_path / "events.jsonl"
    started = time.time()
    ev.write_text(json.dumps({"t": started * 1000, "kind": "progress", "done": 1, "total": 10}) + "\n")
    tail = EventTail(ev)
    tail.poll()
    read_at = time.time()
    last = tail.stats.snapshot().last_progress_t
    assert started - 1 <= last <= read_at  # when the file was written (its mtime), not 50,000 years ahead
    assert silence(read_at + 700, started, last, None) >= 700  # ten minutes on, the phase is silent


def test_an_events_file_replaced_by_a_fifo_is_not_waited_on(tmp_path):
    import os
    import subprocess
    import sys

    ev = tmp_path / "events.jsonl"
    os.mkfifo(ev)
    probe = f"from console.core.lifecycle.livestats import EventTail\nassert EventTail({str(ev)!r}).poll() == []\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_phase_reporting_minutes_apart_gets_a_rate_and_eta_from_its_own_cadence():
    """Train on a CPU reports a step every few minutes: a fixed 30 s window held one point
    and the console said "ETA estimating…" at 75 %."""
    st = LiveStats()
    st.feed([Event(1000.0 + 180 * i, "progress", {"done": 10 * i, "total": 40, "unit": "steps"}) for i in range(4)])
    assert st.rate == pytest.approx(10 / 180)
    assert st.eta_s == pytest.approx(180.0)
    assert not st.snapshot().estimating


def test_the_eta_comes_from_the_first_interval_between_two_progress_events():
    """A train reporting every 10 steps of 40, its first event at step 10 after loading: at
    20 of 40 the console said "ETA estimating…" (the first event was only the starting
    count, so a rate needed three events)."""
    st = LiveStats()
    st.feed([Event(1000.0, "progress", {"done": 10, "total": 40, "unit": "steps"})])
    assert st.rate is None and st.snapshot().estimating
    st.feed([Event(1090.0, "progress", {"done": 20, "total": 40, "unit": "steps"})])
    assert st.rate == pytest.approx(10 / 90)
    assert st.eta_s == pytest.approx(180.0)
    st.feed([Event(1150.0, "progress", {"done": 30, "total": 40, "unit": "steps"})])
    assert st.rate == pytest.approx(10 / 60)  # from two points of work on, the starting count is left out


def test_a_first_interval_shorter_than_a_burst_gives_no_rate():
    """A resumed run announces its count and its first batch a millisecond later: no rate of
    thousands a second."""
    st = LiveStats()
    st.feed([Event(5.0, "progress", {"done": 500, "total": 1000}), Event(5.001, "progress", {"done": 510, "total": 1000})])
    assert st.rate is None and st.snapshot().estimating


def test_failed_records_are_kept_beside_the_done_ones():
    st = LiveStats()
    st.feed([Event(1.0, "progress", {"done": 16, "total": 16, "unit": "records", "failed": 8})])
    assert (st.snapshot().done, st.snapshot().failed) == (16, 8)


@pytest.mark.parametrize(("rate", "unit", "shown"), [
    (12.34, "samples", "12.3 samples/s"),
    (0.5, "prompts", "30.0 prompts/min"),
    (0.05, "prompts", "20s/prompt"),
    (1 / 780, "steps", "13m00s/step"),
    (0.004, "", "4m10s/item"),
])
def test_a_slow_rate_reads_per_minute_or_as_time_per_unit_never_zero_per_second(rate, unit, shown):
    assert format_rate(rate, unit) == shown


def test_a_noisy_training_loss_reads_smoothed_beside_the_last_validation_loss():
    st = LiveStats()
    swings = [1.2, 5.0, 2.0, 3.4] * 10  # batches swing; their mean is 2.9
    st.feed([Event(float(i), "metric", {"name": "lr", "value": 1e-4}) for i in range(3)])
    st.feed([Event(float(i), "metric", {"name": "loss", "value": v}) for i, v in enumerate(swings)])
    st.feed([Event(50.0, "metric", {"name": "val_loss", "value": 1.25})])
    figures = headline_metrics(st.snapshot().metrics)
    assert [f.label for f in figures[:2]] == ["avg loss 2.9 (last 20)", "val_loss 1.25"]
    assert figures[0].values[-1] == 3.4  # the sparkline still draws every batch
