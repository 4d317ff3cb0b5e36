"""The evaluate report as the console reads it: through its record, so the figures shown are
the ones pipeline.evaluate wrote, a report of a version this console does not know is one
line saying so, and anything else (another phase's JSON, a damaged file) is no report at all."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from record_samples import local_report, server_report

from console.core.figures.acceptance import ReportReader, report_candidates, view_of
from pipeline.evaluate.report import summarize
from pipeline.records.evaluate_report import KIND, Best, write_report


def _read(path: Path):
    return ReportReader().read([str(path)])


def test_a_local_report_gives_the_acceptance_per_draft_position_and_the_sweep(tmp_path: Path) -> None:
    report = local_report()
    write_report(tmp_path / "acceptance.json", report)
    v = _read(tmp_path / "acceptance.json")
    assert v is not None and v.refused is None
    assert v.acceptance_length == 2.412 and v.num_steps == 3 and v.prompts == 16
    assert v.accept_rate == (0.78, 0.55, 0.31)
    assert [s.label for s in v.settings] == ["3,1,4", "5,1,6", "5,4,8", "7,4,8", "7,8,32"]
    assert v.best == "5,4,8"  # the report's own pick (the highest speedup estimate), not the longest acceptance
    assert v.flags == report.best.flags


def test_a_servers_report_shows_its_mean_acceptance_and_no_bars(tmp_path: Path) -> None:
    write_report(tmp_path / "server.json", server_report())
    v = _read(tmp_path / "server.json")
    assert v is not None and v.refused is None
    assert v.acceptance_length == 2.25 and v.prompts == 2
    assert v.accept_rate == () and v.settings == () and v.best is None


def test_a_report_of_a_version_this_console_does_not_know_is_one_line_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps({**KIND.encode(local_report()), "version": 999}))
    v = _read(path)
    assert v is not None and v.acceptance_length is None and v.settings == ()
    assert v.refused is not None and "\n" not in v.refused
    assert "version 999" in v.refused and "reads version 1" in v.refused and "rerun" in v.refused


def test_a_report_with_a_figure_of_the_wrong_type_names_it_and_shows_no_figure(tmp_path: Path) -> None:
    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps({**KIND.encode(local_report()), "acceptance_length": "high"}))
    v = _read(path)
    assert v is not None and v.acceptance_length is None
    assert v.refused is not None and "acceptance_length" in v.refused and "a number" in v.refused


def test_json_that_is_not_an_evaluate_report_shows_nothing(tmp_path: Path) -> None:
    files = {"stats.json": {"records": 1200, "dataset_sha256": "ab", "sources": {}},  # merge's stats
             "list.json": [1, 2, 3],
             "guess.json": {"acceptance_length": 2.0, "accept_rate": [0.5]},  # figures, but no evaluate report
             "other.json": {"record": "merge_stats", "version": 1}}
    for name, obj in files.items():
        (tmp_path / name).write_text(json.dumps(obj))
    (tmp_path / "broken.json").write_text('{"record": "evaluate_report", "acceptance_length": 2.')
    for name in [*files, "broken.json"]:
        assert _read(tmp_path / name) is None, name


def test_a_report_written_before_reports_carried_their_version_still_reads(tmp_path: Path) -> None:
    """pipeline.evaluate's reports before the record had no `record` and `version` keys: the
    same fields, read as version 1."""
    old = KIND.encode(local_report())
    del old["record"], old["version"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    v = _read(tmp_path / "old.json")
    assert v is not None and v.refused is None and v.acceptance_length == 2.412


def test_odd_rates_are_bounded_for_drawing() -> None:
    v = view_of(local_report(), "r.json")
    many = replace(local_report(), accept_rate=(1.5, -0.2, 0.5) + (0.1,) * 100)
    w = view_of(many, "r.json")
    assert v.accept_rate == (0.78, 0.55, 0.31)
    assert w.accept_rate[:3] == (1.0, 0.0, 0.5) and len(w.accept_rate) == 32


def test_the_reader_takes_the_first_candidate_that_is_a_report_and_rereads_it_when_it_changes(tmp_path: Path) -> None:
    stats, report, broken = tmp_path / "stats.json", tmp_path / "acceptance.json", tmp_path / "broken.json"
    stats.write_text(json.dumps({"records": 5}))
    broken.write_text('{"acceptance_length": 2.')
    write_report(report, local_report())
    reader = ReportReader()
    missing = str(tmp_path / "absent.json")
    v = reader.read([missing, str(stats), str(broken), str(report)])
    assert v is not None and v.path == str(report) and v.acceptance_length == 2.412
    st = report.stat()
    write_report(report, local_report(acceptance_length=3.25))
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    v = reader.read([missing, str(stats), str(broken), str(report)])
    assert v is not None and v.acceptance_length == 3.25
    report.unlink()
    assert reader.read([str(report)]) is None


def test_candidates_are_the_newest_json_artifacts_then_the_phases_outputs(tmp_path: Path) -> None:
    out = tmp_path / "eval" / "acceptance.json"
    found = report_candidates(["./eval/old.json", "ckpt/model.safetensors", "./eval/acceptance.json"],
                              [out, tmp_path / "eval" / "log.txt"], tmp_path)
    assert found == (str(tmp_path / "eval" / "acceptance.json"), str(tmp_path / "eval" / "old.json"))


def test_a_sweep_as_pipeline_evaluate_writes_it_gives_its_best_setting_and_the_flags_to_paste(tmp_path: Path) -> None:
    """The report's own rows (pipeline.evaluate.sweep.table) and its `best`: the console marks
    the setting evaluate picked and shows the flags evaluate printed last."""
    from pipeline.evaluate import sweep
    from pipeline.evaluate.tree import Setting as SweepSetting

    chain, tree = SweepSetting(3, 1, 4), SweepSetting(3, 2, 6)
    sums = [summarize(3, accepted=[1, 0, 2, 1], tokens=12, prompts=1, spec_forwards=4, greedy_forwards=8),
            summarize(3, accepted=[3, 2, 3, 1], tokens=12, prompts=1, spec_forwards=4, greedy_forwards=12)]
    rows = sweep.table([chain, tree], sums, None)
    top = sweep.best(rows)
    write_report(tmp_path / "r.json", replace(local_report(), **sums[0].record_fields(), settings=rows,
                                              best=Best(setting=top.setting, flags=top.flags)))
    v = _read(tmp_path / "r.json")
    assert v is not None
    assert [s.label for s in v.settings] == ["3,1,4", "3,2,6"]
    assert v.best == "3,2,6"
    assert v.flags == tree.flags()

