"""An evaluation, local or against a server: its report built as the typed record
(pipeline/records/evaluate_report.py) and written once whole, and a stop that lands before the
report is counted or after it, never between."""

from __future__ import annotations

import time
from dataclasses import replace

from pipeline.evaluate.local import run_local
from pipeline.evaluate.options import Options
from pipeline.evaluate.scoring import Progress
from pipeline.evaluate.server import run_server
from pipeline.events import EventWriter
from pipeline.program_edge import SigtermGuard, Terminated
from pipeline.records.evaluate_report import LocalReport, Report, write_report


def evaluate(opts: Options, progress: Progress, term: SigtermGuard) -> int:
    """Score the validated options' prompts and publish the report; 0 once it is whole."""
    started = time.monotonic()
    with EventWriter.from_env() as events:
        try:
            report: Report = run_server(opts, events) if opts.server else run_local(opts, events, progress)
            _publish(opts, replace(report, seconds=round(time.monotonic() - started, 2)), progress, term, events)
        except Terminated as stopped:  # the edge says it and exits 143; the console counts it as a warning
            events.message(f"stopped by SIGTERM; {stopped}", level="warning")
            raise
    return 0


def _publish(opts: Options, report: Report, progress: Progress, term: SigtermGuard, events: EventWriter) -> None:
    if opts.report is not None:
        opts.report.parent.mkdir(parents=True, exist_ok=True)
        # a stop lands before the write or after the report is counted, never between
        with term.deferred():
            write_report(opts.report, report)
            progress.reported = True
            events.artifact(str(opts.report), bytes=opts.report.stat().st_size)
            print(f"evaluate: report -> {opts.report}", flush=True)
    progress.reported = True
    if isinstance(report, LocalReport):
        print(report.best.flags, flush=True)  # the last line: the flags to paste
