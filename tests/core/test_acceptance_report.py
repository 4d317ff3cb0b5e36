"""The evaluate report as the console reads it: today's figures as pipeline.evaluate writes
them, a sweep of SGLang settings in the shapes a report may take, and anything else
(another phase's JSON, a damaged file) read as no report at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.evaluate.report import summarize

from console.core.leaves.acceptance import ReportReader, parse_report, report_candidates


def _today() -> dict:
    """The figures of a local evaluation, written by the stage's own summary."""
    s = summarize(3, accepted=[3, 2, 0, 1, 3, 2, 1, 0], tokens=40, prompts=2, spec_forwards=8, greedy_forwards=20)
    return {"mode": "local", "drafter": "out/drafter", "output_equals_greedy": True, **s.to_json(),
            "per_prompt": [{"id": "p0", "acceptance_length": 2.5}]}


def test_todays_report_gives_the_acceptance_per_draft_position() -> None:
    report = _today()
    v = parse_report(report)
    assert v is not None
    assert v.acceptance_length == report["acceptance_length"]
    assert v.num_steps == 3 and v.prompts == 2
    assert v.accept_rate == tuple(report["accept_rate"]) and len(v.accept_rate) == 3
    assert v.settings == () and v.best is None and v.rates_of is None


def test_a_sweep_names_each_setting_as_sglangs_flags_order_them_and_picks_the_fastest() -> None:
    report = {**_today(), "settings": [
        {"num_steps": 3, "topk": 1, "num_draft_tokens": 4, "acceptance_length": 2.4, "accept_rate": [0.8, 0.5, 0.3],
         "speedup_estimate": 1.6},
        {"num_steps": 5, "topk": 4, "num_draft_tokens": 8, "acceptance_length": 3.0, "accept_rate": [0.9, 0.6],
         "speedup_estimate": 1.9},
        {"num_steps": 7, "topk": 8, "num_draft_tokens": 32, "acceptance_length": 3.3, "speedup_estimate": 1.4}],
        "sglang_flags": ["--speculative-num-steps", "5", "--speculative-eagle-topk", "4"]}
    v = parse_report(report)
    assert v is not None
    assert [s.label for s in v.settings] == ["3,1,4", "5,4,8", "7,8,32"]
    assert v.best == "5,4,8"  # the highest speedup, not the longest acceptance
    assert v.settings[2].accept_rate == ()
    assert v.accept_rate == tuple(_today()["accept_rate"])  # the report's own figures come first
    assert v.flags == "--speculative-num-steps 5 --speculative-eagle-topk 4"


def test_a_sweep_without_top_level_figures_shows_the_best_settings_positions() -> None:
    report = {"sweep": [{"config": [3, 1, 4], "acceptance_length": 2.4, "accept_rate": [0.8, 0.5, 0.3]},
                        {"config": "5,1,6", "acceptance_length": 2.7, "accept_rate": [0.8, 0.6, 0.4, 0.3, 0.2]}],
              "best": 1}
    v = parse_report(report)
    assert v is not None and v.acceptance_length is None
    assert [s.label for s in v.settings] == ["3,1,4", "5,1,6"]
    assert v.best == "5,1,6" and v.rates_of == "5,1,6"
    assert v.accept_rate == (0.8, 0.6, 0.4, 0.3, 0.2)


def test_a_best_named_by_a_mapping_or_a_label_is_taken_as_the_report_says() -> None:
    settings = [{"steps": 3, "eagle_topk": 1, "draft_tokens": 4, "acceptance_length": 2.9},
                {"steps": 5, "eagle_topk": 4, "draft_tokens": 8, "acceptance_length": 2.4}]
    assert parse_report({"settings": settings, "best": {"num_steps": 5, "topk": 4, "num_draft_tokens": 8}}).best == "5,4,8"
    assert parse_report({"settings": settings, "best": "5,4,8"}).best == "5,4,8"
    assert parse_report({"settings": settings, "best": "nonsense"}).best == "3,1,4"  # the longest


def test_odd_values_are_bounded_not_trusted() -> None:
    v = parse_report({"acceptance_length": 2.0, "accept_rate": [1.5, -0.2, "x", None, 0.5] + [0.1] * 100})
    assert v is not None
    assert v.accept_rate[:3] == (1.0, 0.0, 0.5) and len(v.accept_rate) <= 32


def test_json_that_is_not_an_acceptance_report_is_no_report() -> None:
    assert parse_report({"records": 1200, "dataset_sha256": "ab"}) is None  # merge's stats
    assert parse_report([1, 2, 3]) is None
    assert parse_report({"acceptance_length": "high"}) is None
    assert parse_report({"settings": [{"label": "a"}]}) is None


def test_the_reader_takes_the_first_candidate_that_is_a_report_and_rereads_it_when_it_changes(tmp_path: Path) -> None:
    stats, report, broken = tmp_path / "stats.json", tmp_path / "acceptance.json", tmp_path / "broken.json"
    stats.write_text(json.dumps({"records": 5}))
    broken.write_text('{"acceptance_length": 2.')
    report.write_text(json.dumps(_today()))
    reader = ReportReader()
    missing = str(tmp_path / "absent.json")
    v = reader.read([missing, str(stats), str(broken), str(report)])
    assert v is not None and v.path == str(report) and v.acceptance_length == _today()["acceptance_length"]
    report.write_text(json.dumps({**_today(), "acceptance_length": 3.25}))
    st = report.stat()
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


def test_a_sweep_as_pipeline_evaluate_writes_it_gives_its_best_setting_and_the_flags_to_paste() -> None:
    """The report's own rows (pipeline.evaluate.sweep.table) and its `best` mapping: the
    console marks the setting evaluate picked and shows the flags evaluate printed last."""
    from pipeline.evaluate import sweep
    from pipeline.evaluate.tree import Setting as SweepSetting

    chain, tree = SweepSetting(3, 1, 4), SweepSetting(3, 2, 6)
    sums = [summarize(3, accepted=[1, 0, 2, 1], tokens=12, prompts=1, spec_forwards=4, greedy_forwards=8),
            summarize(3, accepted=[3, 2, 3, 1], tokens=12, prompts=1, spec_forwards=4, greedy_forwards=12)]
    rows = sweep.table([chain, tree], sums, None)
    top = sweep.best(rows)
    report = {**_today(), "settings": rows, "best": {"setting": top["setting"], "flags": top["flags"]}}
    v = parse_report(json.loads(json.dumps(report)))
    assert v is not None
    assert [s.label for s in v.settings] == ["3,1,4", "3,2,6"]
    assert v.best == "3,2,6"
    assert v.flags == tree.flags()
