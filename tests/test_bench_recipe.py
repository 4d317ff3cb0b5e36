"""bench/recipe.py: the recipe's device calls through `eagle3 run`. What would silently spoil a
measured run: a call that runs other commands than the one before it (its phases then stale), a
training resized under way (another learning-rate schedule), intervals off the measured run's, a
deadline kept from an earlier call that starts nothing, a result without the calls' state."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

import console  # noqa: F401  (imported before bench/ joins the path: bench has a console.py)
from console.core.config.loader import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "pipeline"))

import recipe  # noqa: E402
from recipe_inputs import write_inputs  # noqa: E402


def _args(*argv: str) -> argparse.Namespace:
    return recipe.parser().parse_args(list(argv))


@pytest.mark.parametrize("steps", [700, 2829, 2830, 2831])
def test_a_sized_training_validates_and_checkpoints_four_times_the_last_at_its_end(steps):
    """2,829 steps saved every 2,829 // 4 = 707 validated and wrote a checkpoint at step 2,828 and
    again at 2,829: one validation of 200 samples and one checkpoint for nothing."""
    from pipeline.train.options import build_parser as train_parser

    cfg = load_config(recipe.CONFIG, recipe.training_sets(steps))
    train = train_parser().parse_args(list(cfg.phase("train").argv[3:]))
    points = [s for s in range(1, steps + 1) if s % train.save_every == 0 or s == steps]
    assert train.steps == steps and len(points) == 4 and points[-1] == steps
    assert train.log_every == steps // 20


def test_a_training_is_sized_from_a_rate_and_a_time_and_never_resized_under_way(tmp_path, capsys):
    work = tmp_path / "work"
    assert recipe.main(["size", "--work", str(work), "--steps-per-s", "5", "--train-s", "566"]) == 0
    assert recipe.read_sets(work)["train_steps"] == "2830"
    (work / "train" / "checkpoints").mkdir(parents=True)
    (work / "train" / "checkpoints" / "latest").write_text("step_00000708\n")
    assert recipe.main(["size", "--work", str(work), "--steps", "4000"]) == 2
    assert "a training of 2830 steps is under way" in capsys.readouterr().err
    assert recipe.read_sets(work)["train_steps"] == "2830"
    assert recipe.main(["size", "--work", str(work), "--steps", "2830"]) == 0  # the same size: nothing changes
    assert recipe.main(["size", "--work", str(work), "--steps", "4000", "--force"]) == 0
    assert recipe.read_sets(work)["train_save_every"] == "1000"


def test_every_call_runs_the_commands_of_the_first_in_the_run_folder(tmp_path):
    work = tmp_path / "work"
    recipe.write_sets(work, {**recipe.read_sets(work), "sharegpt": "/r/sg.json.xz", "train_steps": "2829"})
    later = recipe.walk_argv(_args("call", "--work", str(work), "--label", "3", "--result", "r", "--until", "8m"),
                             recipe.read_sets(work))
    sets = dict(later[i + 1].split("=", 1) for i, x in enumerate(later) if x == "--set")
    assert sets == {"data": str(work.resolve()), "sharegpt": "/r/sg.json.xz", "train_steps": "2829"}
    assert later[-2:] == ["--until", "8m"] and "--all" in later


def test_a_call_left_running_clears_an_earlier_deadline_and_one_phase_runs_alone():
    argv = recipe.walk_argv(_args("call", "--work", "w", "--label", "2", "--result", "r", "--leave-running",
                                  "--budget-s", "500"), {})
    assert argv[:6] == ["timeout", "-s", "INT", "-k", "60", "500"]  # the walk stops waiting; the phases go on
    assert argv[-2:] == ["--until", "off"]  # a deadline kept from call 1 would start nothing
    one = recipe.walk_argv(_args("call", "--work", "w", "--label", "1", "--result", "r", "--phase", "split",
                                 "--leave-running"), {})
    assert one[one.index("run") + 2:one.index("run") + 4] == ["split", "--wait"] and "--all" not in one
    assert recipe.main(["call", "--work", "w", "--label", "2", "--result", "r"]) == 2


def test_a_call_writes_the_walk_status_journal_and_figures_into_the_result(tmp_path):
    inputs = write_inputs(tmp_path / "inputs")
    work, result = tmp_path / "work", tmp_path / "recipe-console.txt"
    code = recipe.main(["call", "--work", str(work), "--label", "1", "--first", "--result", str(result),
                        "--commit", "abc1234", "--phase", "split", "--leave-running", "--budget-s", "120",
                        *[x for k, v in inputs.items() for x in ("--set", f"{k}={v}")],
                        "--set", "heldout_share=0.2"])
    assert code == 0
    text = result.read_text()
    assert text.startswith("# bench/recipe.py on the device: configs/examples/smollm2-h200.yaml through eagle3 "
                           "run; commit abc1234\n")
    assert "## call 1, " in text and "the walk ended with exit 0 (every phase done)" in text
    status = text.split("### eagle3 status --json (exit 0)\n")[1].split("\n### ")[0]
    assert {p["phase"]: p["state"] for p in json.loads(status)["phases"]}["split"] == "done"
    assert "### eagle3 journal -n 40 (exit 0)" in text and "split" in text.split("### eagle3 journal")[1]
    assert "split: 76 training records, 8 heldout-mtbench, 13 heldout-sharegpt" in text
    assert recipe.read_sets(work)["sharegpt"] == str(inputs["sharegpt"])  # the next call passes them again


def test_the_report_reads_each_figure_from_the_stages_typed_records(tmp_path, capsys):
    from record_samples import local_report, merge_stats, regenerate_stats, synthesis_stats, train_summary

    from pipeline.records.evaluate_report import write_report
    from pipeline.records.merge_stats import write_stats as write_merge_stats
    from pipeline.records.regenerate_stats import write_stats as write_regen_stats
    from pipeline.records.synthesis_stats import write_stats as write_synth_stats
    from pipeline.records.train_summary import write_summary

    work = tmp_path / "work"
    cfg = load_config(recipe.CONFIG, recipe.read_sets(work))
    out = {p.id: [cfg.resolve(o) for o in p.outputs] for p in cfg.phases}
    for path in (out["regenerate"][1], out["synthesize"][1], out["merge"][1], out["train"][0] / "summary.json", *out["evaluate-mtbench-5"]):
        path.parent.mkdir(parents=True, exist_ok=True)
    write_regen_stats(out["regenerate"][1], regenerate_stats())
    write_synth_stats(out["synthesize"][1], synthesis_stats())
    write_merge_stats(out["merge"][1], merge_stats([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}], "ab" * 32))
    write_summary(out["train"][0] / "summary.json", train_summary(peak_gpu_bytes=17 * 2**30))
    write_report(out["evaluate-mtbench-5"][0], local_report())
    assert recipe.main(["report", "--work", str(work), "--result", str(tmp_path / "r.txt")]) == 0
    text = (tmp_path / "r.txt").read_text()
    assert "regenerate: done, 39 of 40 records, 4,096 tokens in 62 s (67 tokens/s), failures {'http_5xx': 1}" in text
    assert "merge: 1 records, 3 tokens, 2 learnt, 0 cut at 3; by source: tiny 1 records, 3 tokens, 2 learnt" in text
    assert ("synthesize: stopped, 10 of 24 records from 14 asked, 500 tokens in 42 s (12 tokens/s); dropped duplicate 2, "
            "too_short 1; 0 looping answers cut") in text
    assert ("train: 30 of 40 steps (stopped), resumed from step 20, 123,456 real tokens seen; this session 40,000 in "
            "12 s (3,200 tokens/s); loss 0.200, acc 0.50/0.30/0.20, val acc 0.40/0.25/0.10, peak GPU 17.0 GiB") in text
    assert ("evaluate-mtbench-5: acceptance length 2.412 at 3 draft steps, accept rate per position 0.78/0.55/0.31, "
            "16 prompts, 318 rounds") in text
    assert "evaluate-sharegpt-3" not in text  # not evaluated: no line, no guess
