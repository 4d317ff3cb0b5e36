"""Honest headlines in a phase's detail, as a newcomer read them: evaluate's figure belongs to
the setting it names, a single setting is not drawn as a strong result, the two losses say
what they are, charts of one or two points say so, sparklines sit by their labels, and no
line of figures or volume label ends inside a word or changes from one look to the next."""

from __future__ import annotations

import re

import pytest
from textual.app import App, ComposeResult

from console.core.figures.acceptance import AcceptanceView, SettingFigures
from console.core.figures.curves import StepCurve
from console.core.lifecycle.livestats import LiveSnapshot
from console.core.telemetry.history import DiskForecast
from console.core.telemetry.samples import DiskReading, VolumeSample
from console.ui.components.detail.acceptance_bars import acceptance_lines
from console.ui.components.detail.charts import CurveChart
from console.ui.components.detail.stats_panel import stats_lines
from console.ui.components.machine.disk_panel import volume_line

# The demo's sweep as evaluate reports it: the top-level figures are the first setting's (the
# chain 3,1,4), the best is another.
CHAIN = SettingFigures("3,1,4", 1.825, (0.52, 0.23, 0.08), 1.21)
TREE = SettingFigures("3,2,6", 2.109, (0.61, 0.36, 0.14), 1.38)
SWEEP = AcceptanceView("r.json", 0.0, 1.825, 3, 16, CHAIN.accept_rate, (CHAIN, TREE), "3,2,6", None)
SINGLE = AcceptanceView("r.json", 0.0, 1.059, 3, 16, (0.05, 0.01, 0.0), (SettingFigures("3,1,4", 1.059, (0.05, 0.01, 0.0), 0.16),),
                        "3,1,4", None)


def _plain(v: AcceptanceView, width: int, rows: int) -> list[str]:
    return [ln.plain for ln in acceptance_lines(v, width, rows)]


@pytest.mark.parametrize(("width", "rows"), [(78, 2), (78, 4), (156, 8), (50, 4)])
def test_evaluate_headline_shows_the_best_settings_figure_and_the_bars_name_their_setting(width, rows) -> None:
    lines = _plain(SWEEP, width, rows)
    assert lines[0].startswith("acceptance 2.109 at 3,2,6"), lines[0]
    assert "1.825" not in lines[0]  # the chain's figure is not the headline beside "best 3,2,6"
    assert "per position, 3,2,6" in "\n".join(lines)
    shown = " ".join(lines)
    assert "0.61" in shown and "0.52" not in shown  # the best setting's own rates, not the chain's


def test_a_single_setting_is_not_drawn_as_a_strong_result() -> None:
    for width, rows in ((78, 2), (78, 4), (156, 8)):
        lines = _plain(SINGLE, width, rows)
        text = "\n".join(lines)
        assert "settings" not in text and "best" not in text, text  # no "1 settings", no "best"
        assert "speedup estimate 0.16x (slower than greedy decoding)" in text, text
        assert not any("3,1,4 █" in ln for ln in lines), text  # no full-length bar for the one setting
        assert lines[0].startswith("acceptance 1.059 at 3,1,4"), lines[0]


def _curve(n: int) -> tuple[str, object]:
    c = StepCurve()
    for k in range(n):
        c.append(10.0 * (k + 1), 3.0 - 0.1 * k)
    return ("loss", c.frozen())


@pytest.mark.parametrize("points", [1, 2, 3])
async def test_a_chart_of_fewer_than_three_points_says_so_instead_of_drawing_blocks(points: int) -> None:
    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield CurveChart(id="c")

    app = Host()
    async with app.run_test(size=(80, 4)) as pilot:
        chart = app.query_one(CurveChart)
        chart.curve = _curve(points)
        await pilot.pause()
        spark = chart.query_one("Sparkline")
        note = chart.query_one(".few-points")
        if points < 3:
            assert not spark.display and note.display
            assert f"{points} point" in str(note.render()) and "from 3" in str(note.render())
        else:
            assert spark.display and not note.display and len(spark.data) == 3


def _snap(**kw) -> LiveSnapshot:  # type: ignore[no-untyped-def]
    base = dict(done=None, total=None, unit=None, fraction=None, rate=None, eta_s=None, bytes_written=None,
                tokens_per_s=None, remaining_bytes=None, last_progress_t=None, last_message=None)
    return LiveSnapshot(**{**base, **kw})


@pytest.mark.parametrize("width", [78, 120, 156])
def test_sparklines_sit_beside_their_labels_and_one_point_says_so(width: int) -> None:
    metrics = {"lr": [1e-4, 1e-4, 2e-4, 2e-4, 3e-4], "grad_norm": [0.7]}
    lines = [ln.plain for ln in stats_lines(_snap(metrics=metrics), width)]
    lr = next(ln for ln in lines if ln.startswith("lr "))
    assert re.fullmatch(r"lr 0\.0003 +[▁-█]{5}", lr.rstrip()), lr  # five cells, right after the label
    assert len(lr.rstrip()) <= 26 + 5
    norm = next(ln for ln in lines if ln.startswith("grad_norm"))
    assert "1 point so far" in norm and not re.search("[▁-█]", norm), norm


def test_the_two_losses_say_what_they_are() -> None:
    """The chart's `loss` is the newest batch; the figure beside the rate is a mean, labelled so."""
    metrics = {"loss": [8.87] + [3.4] * 17}
    text = "\n".join(ln.plain for ln in stats_lines(_snap(done=18, total=40, unit="steps", fraction=0.45,
                                                          metrics=metrics), 78, compact=True))
    assert "avg loss 3.7 (last 18)" in text, text
    assert not re.search(r"(?<!avg )loss \d", text), text  # no bare "loss" figure beside the chart's


@pytest.mark.parametrize("width", range(30, 90, 3))
def test_the_rate_line_never_ends_inside_a_figure(width: int) -> None:
    snap = _snap(done=18, total=40, unit="steps", fraction=0.45, rate=0.31, eta_s=71, bytes_written=12_300_000,
                 tokens_per_s=18_300, metrics={"loss": [3.96] * 20, "val_loss": [3.41]})
    facts = ["18.6 steps/min", "ETA 1m11s", "12.3M written", "18.3k tok/s", "avg loss 3.96 (last 20)", "val_loss 3.41"]
    line = stats_lines(snap, width, compact=True)[1].plain.rstrip()
    assert len(line) <= width
    parts = line.removesuffix(" …").split(" · ")
    assert all(p in facts for p in parts), (width, line)  # whole figures only
    at = [facts.index(p) for p in parts]
    assert at == sorted(at) and parts[:2] == facts[:2], (width, line)  # in order; the rate and ETA first
    if len(parts) > 2:  # the loss comes before the bytes written when not all fit
        assert "avg loss 3.96 (last 20)" in parts, (width, line)


def _volume(path: str, used: float, free: float, t: float) -> DiskReading:
    return DiskReading(t=t, volumes=(VolumeSample(path, used + free, used, free),))


@pytest.mark.parametrize("path", ["/home/newcomer/eagle3-console/configs/.eagle3-demo", "/data/eagle3/work",
                                  "/scratch"])
@pytest.mark.parametrize("width", [35, 36, 60, 80])
def test_a_volume_label_is_stable_from_one_look_to_the_next(path: str, width: int) -> None:
    """No rate yet, a volume filling, an idle one: the label stays the same, cut only before a
    folder or a word (the user saw `…3-demo`, `…demo` and `…gs/.eagle3-demo` in turn)."""
    G = 10**9
    labels = set()
    for growth in (None, 40e6, 0.0):
        forecast = None
        if growth is not None:
            fc = DiskForecast()
            for k in range(10):
                fc.update(_volume(path, 28 * G + k * 2 * growth, 79 * G - k * 2 * growth, 2.0 * k))
            forecast = fc.volume(path)
        line = volume_line(_volume(path, 28 * G, 79 * G, 20.0).volumes[0], forecast, width).plain
        assert len(line) <= width, line
        labels.add(line.split(" ", 1)[0])
    assert len(labels) == 1, labels
    label = labels.pop()
    tail = label.removeprefix("…")
    assert label == path or path.endswith(tail) and (tail[0] in "/-_." or path[-len(tail) - 1] in "/-_.") or (
        label.endswith("…") and "/" not in tail), label
