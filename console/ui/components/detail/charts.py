"""Pictures in the selected phase's detail: a training run's loss and val acc_0 over its
steps, and an evaluation's acceptance as bars (`acceptance_bars.py`).

The curves come with the phase's live figures (`LiveSnapshot.curves`, read by the status
poller); the evaluate report is a file, read by this panel's own poller thread
(`ReportReader`) and posted back, so no read happens on the UI loop. Each chart is a view of
frozen data: assigning it redraws."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from console.core.figures.acceptance import AcceptanceView, ReportReader, report_candidates
from console.core.figures.curves import Curve
from console.core.lifecycle.livestats import LiveSnapshot
from console.core.lifecycle.state import PhaseStatus
from console.ui.components.detail.acceptance_bars import AcceptanceBars
from console.ui.messages import Reading
from console.ui.pollers import Poller
from console.ui.render import CHART_MIN_POINTS, few_points, fit_words

REPORT_INTERVAL = 2.0
LABEL_W = 11  # characters of a chart's label; its column is one wider, a gap before the curve


@dataclass
class ReportRead(Reading):
    """The report found among `candidates` (None: none of them is one)."""

    candidates: tuple[str, ...]
    view: AcceptanceView | None


def pick_curves(curves: dict[str, Curve]) -> list[tuple[str, Curve]]:
    """Loss, and val acc_0, or the training acc_0 until validation has run twice (one point
    is no curve)."""
    return [(name.replace("_acc", " acc"), curves[name]) for name in charted_metrics(curves)]


def charted_metrics(curves: dict[str, Curve]) -> list[str]:
    """The metrics the charts draw over the whole run; the stats panel leaves their
    sparklines to them and keeps only their figures."""
    out = [name for name in ("loss",) if name in curves]
    if "val_acc_0" in curves and curves["val_acc_0"].points >= CHART_MIN_POINTS:
        out.append("val_acc_0")
    elif "acc_0" in curves:
        out.append("acc_0")
    return out


def _g(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.2e}"


def curve_label(title: str, c: Curve, rows: int) -> Content:
    """The chart's label: what and the newest value, side by side on a one-row chart; on
    taller ones, one per row, then the step and the range the curve spans."""
    if rows <= 1:
        return Content.assemble((title, "bold"), " ", (_g(c.last), "$accent"))
    lines = [Content.styled(fit_words(title, LABEL_W), "bold"), Content.styled(_g(c.last), "$accent")]
    if rows >= 3:
        lines.append(Content.styled(fit_words(f"step {c.last_step:,.0f}", LABEL_W), "$text-muted"))
    if rows >= 4:
        lines.append(Content.styled(fit_words(f"{c.low:.3g}-{c.high:.3g}", LABEL_W), "$text-muted"))
    return Content("\n").join(lines[:rows])


def chart_rows(terminal_rows: int) -> tuple[int, int]:
    """(curve rows, bar rows) for a terminal this tall: the log keeps its lines first. Under
    30 rows (80x24 with a full phase list and 8 GPUs leaves the detail 7) a curve is one row;
    at 36 and over, where the screen turns tall, the charts grow."""
    if terminal_rows < 30:
        return 1, 2
    if terminal_rows < 36:
        return 2, 4
    return 4, 8


class CurveChart(Horizontal):
    """One metric over the run's steps: its label beside a Sparkline of the bucket means."""

    DEFAULT_CSS = """
    CurveChart { height: 1; width: 1fr; }
    CurveChart > .curve-label { width: 12; height: 100%; }
    CurveChart > Sparkline { width: 1fr; height: 100%; margin-right: 2; }
    CurveChart > .few-points { width: 1fr; height: 100%; margin-right: 2; display: none; }
    CurveChart > Sparkline > .sparkline--max-color { color: $accent; }
    CurveChart > Sparkline > .sparkline--min-color { color: $accent 40%; }
    """

    curve: reactive[tuple[str, Curve] | None] = reactive(None, init=False)
    rows: reactive[int] = reactive(1, init=False)

    def compose(self) -> ComposeResult:
        yield Static(classes="curve-label")
        yield Sparkline([], summary_function=_mean)
        yield Static(classes="few-points")

    def watch_curve(self, curve: tuple[str, Curve] | None) -> None:
        self.display = curve is not None
        if curve is not None:
            self._draw(*curve)

    def watch_rows(self, rows: int) -> None:
        self.styles.height = rows
        if self.curve is not None:
            self._draw(*self.curve)

    def _draw(self, title: str, c: Curve) -> None:
        label = curve_label(title, c, self.rows)
        static = self.query_one(".curve-label", Static)
        static.styles.width = label.cell_length + 1 if self.rows <= 1 else LABEL_W + 1
        static.update(label)
        few = c.points < CHART_MIN_POINTS
        spark, note = self.query_one(Sparkline), self.query_one(".few-points", Static)
        spark.display, note.display = not few, few
        if few:
            note.update(Content.styled(few_points(c.points), "$text-muted"))
        else:
            spark.data = c.values


def _mean(values: Any) -> float:
    return sum(values) / len(values)


class DetailCharts(Vertical):
    """The phase's pictures, hidden when it has none. `show(status, live)` from the detail's
    redraw; the evaluate report arrives from the poller as `ReportRead`."""

    DEFAULT_CSS = """
    DetailCharts { height: auto; padding: 0 1; display: none; }
    DetailCharts > #curves { height: auto; }
    """

    def __init__(self, root: str, interval: float = REPORT_INTERVAL, **kw: Any) -> None:
        super().__init__(**kw)
        self.root = root
        self.reader = ReportReader()
        self.candidates: tuple[str, ...] = ()  # replaced, never mutated: the poller reads it
        self.started_at: float | None = None
        self.poller = Poller(self, "report", interval, self._read_report)

    def compose(self) -> ComposeResult:
        with Horizontal(id="curves"):
            yield CurveChart(id="curve-0")
            yield CurveChart(id="curve-1")
        yield AcceptanceBars(id="acceptance")

    def on_mount(self) -> None:
        for chart in self.query(CurveChart):
            chart.display = False
        self.query_one(AcceptanceBars).display = False
        self.screen.screen_layout_refresh_signal.subscribe(self, self._fit_rows)
        self._fit_rows()
        self.poller.start()

    def _fit_rows(self, _: object = None) -> None:
        """After a layout (a resized terminal): the charts' rows for the terminal's height."""
        curve_rows, bar_rows = chart_rows(self.app.size.height)
        for chart in self.query(CurveChart):
            chart.rows = curve_rows
        self.query_one(AcceptanceBars).rows = bar_rows

    def on_unmount(self) -> None:
        self.poller.stop()

    def show(self, status: PhaseStatus | None, live: LiveSnapshot | None) -> None:
        """The selected phase's pictures: its curves now, its report at the poller's next look."""
        curves = pick_curves(live.curves) if live is not None else []
        for i, chart in enumerate(self.query(CurveChart)):
            chart.curve = curves[i] if i < len(curves) else None
        self.query_one("#curves").display = bool(curves)
        self.started_at = status.started_at if status is not None else None
        found = () if status is None else report_candidates(
            live.artifacts if live is not None else (), status.phase.outputs, self.root)
        if found != self.candidates:
            self.candidates = found
            self._show_report(None)
            if found:
                self.poller.poke()
        bars = self.query_one(AcceptanceBars)
        bars.stale = self._stale(bars.view)  # a new run of the same phase: its old report
        self._update_display()

    def _read_report(self) -> ReportRead | None:
        """(The poller's thread.)"""
        candidates = self.candidates
        if not candidates:
            return None
        return ReportRead(candidates, self.reader.read(candidates))

    def on_report_read(self, msg: ReportRead) -> None:
        if msg.candidates == self.candidates:
            self._show_report(msg.view)
            self._update_display()

    def _show_report(self, view: AcceptanceView | None) -> None:
        bars = self.query_one(AcceptanceBars)
        bars.view = view
        bars.stale = self._stale(view)
        bars.display = view is not None

    def _stale(self, view: AcceptanceView | None) -> bool:
        """The report was written before the run shown started: the last run's figures."""
        return view is not None and self.started_at is not None and view.mtime < self.started_at

    def _update_display(self) -> None:
        shown = bool(self.query_one("#curves").display or self.query_one(AcceptanceBars).display)
        if shown != self.display:
            self.display = shown
