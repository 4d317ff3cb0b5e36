"""`eagle3 status`'s progress line reads as the console's: a slow rate per minute or as the
time a unit takes, failed units beside the done ones, the smoothed training loss."""

from __future__ import annotations

from console.cli.status import progress_line
from console.core.lifecycle.livestats import LiveSnapshot


def _snap(**kw) -> LiveSnapshot:  # type: ignore[no-untyped-def]
    base = dict(done=None, total=None, unit=None, fraction=None, rate=None, eta_s=None, bytes_written=None,
                tokens_per_s=None, remaining_bytes=None, last_progress_t=None, last_message=None)
    return LiveSnapshot(**{**base, **kw})


def test_status_progress_line_reads_slow_rates_failures_and_the_smoothed_loss() -> None:
    line = progress_line(_snap(done=3, total=32, unit="prompts", fraction=3 / 32, rate=0.05, eta_s=580))
    assert "20s/prompt" in line and "0.0/s" not in line
    line = progress_line(_snap(done=16, total=16, unit="records", fraction=1.0, failed=8, rate=0.5))
    assert "16/16 records, 8 failed" in line and "30.0 records/min" in line
    line = progress_line(_snap(done=30, total=40, unit="steps", fraction=0.75,
                                metrics={"lr": [1e-4], "loss": [1.0, 3.0], "val_loss": [1.25]}))
    assert "avg loss 2 (last 2)  val_loss 1.25" in line
