"""The pictures in a phase's detail: a training run's loss and val acc_0 over its steps, and
an evaluation's acceptance per draft position and per sweep setting as bars. The phases
are real runs (tests/ui/charts_project.py writes what the train and evaluate stages write);
the snapshots pin the times, the log and the journal that a run would change."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from charts_project import T0, write_charts_project
from ui_harness import FAST, FROZEN, finish, make_app, wait_for

from console.core.figures.acceptance import AcceptanceView, SettingFigures
from console.core.lifecycle.project import Project
from console.ui.components.detail.acceptance_bars import AcceptanceBars, acceptance_lines
from console.ui.components.detail.charts import CurveChart, DetailCharts
from console.ui.components.logs.journal_view import JournalView
from console.ui.components.logs.log_view import LogView
from console.ui.components.machine.disk_panel import DiskPanel
from console.ui.components.machine.gpu_panel import GpuPanel

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])


@pytest.fixture
def charts_project(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """Its phases end on their own in a second; the zone is pinned, as times on screen are local."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield Project.load(write_charts_project(tmp_path))
    monkeypatch.undo()
    time.tzset()


async def _select(pilot, phase_id: str) -> None:  # type: ignore[no-untyped-def]
    main = pilot.app.main_screen()
    await wait_for(pilot, lambda: phase_id in main.follow.by_id, what=f"{phase_id} listed")
    main.query_one("#phases").select_id(phase_id)
    await wait_for(pilot, lambda: main.selected == phase_id, what=f"{phase_id} selected")


def _chart(app, index: int):  # type: ignore[no-untyped-def]
    return app.main_screen().query_one(f"#curve-{index}", CurveChart)


async def test_the_train_detail_draws_loss_and_val_acc_0_over_the_whole_run(charts_project) -> None:  # type: ignore[no-untyped-def]
    finish(charts_project, "train")
    app = make_app(charts_project, intervals=FAST)
    async with app.run_test(size=(80, 24)) as pilot:
        await _select(pilot, "train")
        loss, val = _chart(app, 0), _chart(app, 1)
        await wait_for(pilot, lambda: loss.curve is not None and val.curve is not None, what="both curves")
        assert app.main_screen().query_one(DetailCharts).display
        (t0, c0), (t1, c1) = loss.curve, val.curve
        assert (t0, t1) == ("loss", "val acc_0")  # val acc_0, not the training acc_0, once validation ran
        assert c0.points == 300 and c0.last_step == 3000 and len(c0.values) <= 256
        assert c0.values[0] > 4.0 and c0.values[-1] < 1.6  # the loss fell over the run, and the chart says so
        assert c1.points == 10 and c1.values[-1] > c1.values[0]
        spark = loss.query_one("Sparkline")
        assert tuple(spark.data) == c0.values
        label = str(loss.query_one(".curve-label").render())
        assert label.split() == ["loss", f"{c0.last:.4g}"]
        await _select(pilot, "idle")  # a phase with no metrics and no report: no picture
        await wait_for(pilot, lambda: not app.main_screen().query_one(DetailCharts).display, what="charts hidden")


async def test_the_evaluate_detail_shows_acceptance_bars_once_its_report_exists(charts_project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(charts_project, intervals=FAST)
    async with app.run_test(size=(80, 24)) as pilot:
        main = app.main_screen()
        await _select(pilot, "evaluate")
        bars = main.query_one(AcceptanceBars)
        await pilot.pause()
        assert bars.view is None and not main.query_one(DetailCharts).display  # never run: no report, nothing
        charts_project.start("evaluate")
        await wait_for(pilot, lambda: bars.view is not None, timeout=30, what="the report read")
        assert main.query_one(DetailCharts).display
        v = bars.view
        assert v.acceptance_length == 2.412 and v.accept_rate == (0.78, 0.55, 0.31)
        assert [s.label for s in v.settings] == ["3,1,4", "5,1,6", "5,4,8", "7,4,8", "7,8,32"]
        assert v.best == "5,4,8" and not bars.stale
        text = "\n".join(line.plain for line in bars.lines(78))
        assert text.startswith("acceptance 3.050 at 5,4,8 · best of 5 settings")  # the best's figure, not 3,1,4's
        assert "per position, 5,4,8" in text and "0.86" in text and "best" in text
        # A report older than the run shown (the stage failed before writing a new one) says so.
        os.utime(v.path, (T0, T0))
        await wait_for(pilot, lambda: bars.stale, what="the report read again, older than the run")
        assert bars.lines(78)[0].plain.startswith("previous run · acceptance 3.050 at 5,4,8")


def _view(n_settings: int = 5) -> AcceptanceView:
    lengths = [2.41, 2.71, 3.05, 3.11, 3.32, 2.2, 2.9][:n_settings]
    settings = tuple(SettingFigures(f"{i},1,{i + 1}", a, (0.8, 0.5), 1.0 + a / 10) for i, a in enumerate(lengths, 3))
    return AcceptanceView("r.json", 0.0, 2.41, 3, 16, (0.78, 0.55, 0.31), settings, settings[2].label, None)


def test_setting_bars_are_one_width_so_their_lengths_compare() -> None:
    lines = [ln.plain for ln in acceptance_lines(_view(), 78, 8)]
    rows = lines[1:]  # under the title
    assert len(rows) == 5
    right = [ln[ln.rindex(",1,") - 1:] for ln in rows]  # the settings column
    filled = [r.count("█") for r in right]
    spans = {r.count("█") + r.count("░") + sum(r.count(c) for c in "▏▎▍▌▋▊▉") for r in right}
    assert len(spans) == 1  # every bar spans the same cells
    assert filled == sorted(filled) and filled[0] < filled[4]  # lengths 2.41 ... 3.32, in that order
    assert "best" in rows[2] and "best" not in rows[0]


def test_a_short_terminal_folds_what_does_not_fit_but_keeps_the_best_setting() -> None:
    v = _view(7)
    lines = [ln.plain for ln in acceptance_lines(v, 78, 4)]
    assert len(lines) == 1 + 4  # the title and four rows
    assert "+4 more settings" in lines[-1]
    assert any("5,1,6" in ln and "best" in ln for ln in lines)
    positions = [ln.plain for ln in acceptance_lines(
        AcceptanceView("r.json", 0.0, 3.0, 7, 8, (0.9, 0.7, 0.5, 0.4, 0.3, 0.2, 0.1), (), None, None), 78, 4)]
    assert positions[-1].strip() == "pos 4-7  0.40 0.30 0.20 0.10"


def test_a_report_older_than_the_run_shown_says_so() -> None:
    lines = [ln.plain for ln in acceptance_lines(_view(), 78, 4, stale=True)]
    assert lines[0].startswith("previous run · acceptance 3.050 at 5,1,6")


# -- snapshots ------------------------------------------------------------------------------

PINNED_LOG = {
    "train": ["train: step 2400/3000 loss 1.3921 acc 0.603 | 41,200 tok/s lr 1.00e-04",
              "train: step 2700/3000 validation: loss 1.5158 acc 0.590",
              "train: step 3000/3000 validation: loss 1.4083 acc 0.591",
              "train: finished 3000 steps"],
    "evaluate": ["evaluate: 16 held-out prompts, 3 draft steps, scoring 5 settings",
                 "evaluate: acceptance length 2.412 at 3 draft steps",
                 "evaluate: report -> ./work/eval/acceptance.json"],
}


async def _pin(pilot, phase_id: str) -> None:  # type: ignore[no-untyped-def]
    """Stop every reader, then pin what a run changes from one test to the next: its times,
    its log (the launcher's lines carry times and paths) and the journal."""
    main = pilot.app.main_screen()
    for poller in [*main.pollers.values(), main.query_one(DetailCharts).poller]:
        poller.stop(wait=10)
    status = main.pollers["status"]
    await wait_for(pilot, lambda: main.follow.looks == status.posted, what="the last snapshot handled")
    await pilot.pause()
    for i, st in enumerate(main.follow.statuses):
        if st.started_at is not None:
            st.started_at, st.ended_at = T0 + 600 * i, T0 + 600 * i + 95
    main.query_one("#phases").show(main.follow.statuses, main.follow.stalled, main.flow.starting)
    log = main.query_one("#log", LogView)
    log.clear()
    log.set_source(f"/data/eagle3/state/runs/{phase_id}/20260101-000000-abcd/output.log")
    log.append(PINNED_LOG[phase_id])
    main.query_one("#journal", JournalView).show(
        [{"t": T0, "event": "run_started", "phase": phase_id, "run_id": "20260101-000000-abcd", "user": "ops"},
         {"t": T0 + 95, "event": "run_ended", "phase": phase_id, "run_id": "20260101-000000-abcd", "code": 0}],
        show_phase=False)
    main.show_detail()
    pilot.app.clear_notifications()
    await pilot.pause()
    await wait_for(pilot, lambda: log.settled, what="the pinned log drawn")
    await pilot.wait_for_scheduled_animations()


def _settle_on(phase_id: str):  # type: ignore[no-untyped-def]
    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        main = pilot.app.main_screen()
        await wait_for(pilot, lambda: main.follow.statuses and main.query_one(GpuPanel).view is not None
                       and main.query_one(DiskPanel).view is not None, what="first reads")
        await _select(pilot, phase_id)
        charts = main.query_one(DetailCharts)
        if phase_id == "train":
            await wait_for(pilot, lambda: _chart(pilot.app, 1).curve is not None, what="the curves")
        else:
            await wait_for(pilot, lambda: charts.query_one(AcceptanceBars).view is not None, what="the report")
        await _pin(pilot, phase_id)
    return settle


@SIZES
def test_train_charts_snapshot(snap_compare, charts_project, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    finish(charts_project, "train")
    app = make_app(charts_project, intervals=FROZEN, clock=lambda: T0 + 3600)
    assert snap_compare(app, terminal_size=size, run_before=_settle_on("train"))


@SIZES
def test_evaluate_bars_snapshot(snap_compare, charts_project, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    finish(charts_project, "evaluate")
    app = make_app(charts_project, intervals=FROZEN, clock=lambda: T0 + 3600)
    assert snap_compare(app, terminal_size=size, run_before=_settle_on("evaluate"))


def test_a_report_the_console_cannot_read_is_one_line_of_reason() -> None:
    refused = AcceptanceView("r.json", 0.0, None, None, None, (), (), None, None,
                             refused="evaluate report of version 999: this console reads version 1; rerun the "
                                     "evaluation or update eagle3-console")
    lines = [ln.plain for ln in acceptance_lines(refused, 60, 8)]
    assert len(lines) == 1 and lines[0].startswith("evaluate report of version 999")
