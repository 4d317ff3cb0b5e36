"""The detail pane's figures as a newcomer read them on a CPU: an evaluate at one prompt
every 20 s, a regenerate whose records half failed, a train whose batch loss swings."""

from __future__ import annotations

from console.core.lifecycle.livestats import LiveSnapshot
from console.ui.components.detail.stats_panel import stats_lines


def _snap(**kw) -> LiveSnapshot:  # type: ignore[no-untyped-def]
    base = dict(done=None, total=None, unit=None, fraction=None, rate=None, eta_s=None, bytes_written=None,
                tokens_per_s=None, remaining_bytes=None, last_progress_t=None, last_message=None)
    return LiveSnapshot(**{**base, **kw})


def _text(snap: LiveSnapshot, width: int = 78, compact: bool = True) -> str:
    return "\n".join(line.plain for line in stats_lines(snap, width, compact))


def test_a_slow_evaluate_reads_time_per_prompt_not_zero_per_second() -> None:
    text = _text(_snap(done=3, total=32, unit="prompts", fraction=3 / 32, rate=0.05, eta_s=580))
    assert "20s/prompt" in text and "ETA 9m40s" in text
    assert "0.0" not in text


def test_failed_records_show_beside_the_done_ones() -> None:
    text = _text(_snap(done=16, total=16, unit="records", fraction=1.0, failed=8, ended=True))
    assert "16/16 records, 8 failed" in text


def test_train_shows_the_smoothed_loss_beside_the_last_validation_loss() -> None:
    metrics = {"lr": [1e-4], "loss": [1.2, 5.0, 2.0, 3.4] * 10, "val_loss": [1.25]}
    for compact in (True, False):
        text = _text(_snap(done=30, total=40, unit="steps", fraction=0.75, metrics=metrics), 100, compact)
        assert "avg loss 2.9 (last 20)" in text and "val_loss 1.25" in text, text
        assert "loss 3.4 " not in text


def test_a_phases_warnings_are_counted_beside_its_progress() -> None:
    from console.core.lifecycle.livestats import LiveStats
    from pipeline.events import Event

    st = LiveStats()
    st.feed([Event(1.0, "progress", {"done": 2, "total": 10, "unit": "steps"}),
             Event(2.0, "message", {"level": "warning", "text": "torch.compile of the drafter's layer failed"}),
             Event(3.0, "message", {"level": "info", "text": "step 2"}),
             Event(4.0, "message", {"level": "warning", "text": "--max-len 4096 is above the target's 2048"})])
    assert st.snapshot().warnings == 2
    assert "⚠ 2 warnings" in _text(st.snapshot())
    assert "warning" not in _text(_snap(done=2, total=10, unit="steps", fraction=0.2))
