"""bench/recipe.py's own logic: what spreads one measured run over several 10-minute device calls.

The whole `bench/recipe.py --small` run takes minutes on two cores (a few dozen stage processes),
so it is left to the bench; these pin what would silently spoil a run on the device: a phase run
out of order, training sized past the call's time, the raw arm's prompts drifting from the
regenerated ones, or an earlier call's figures missing from the last call's result."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest

import console  # noqa: F401  (imported before bench/ joins the path: bench has a console.py)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import recipe  # noqa: E402


def test_phases_run_in_pipeline_order_whatever_order_they_are_given_in():
    assert recipe.parse_phases("train,merge") == ["merge", "train"]
    assert recipe.parse_phases("all") == list(recipe.PHASES)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown extrct"):
        recipe.parse_phases("merge,extrct")


def test_an_arm_is_data_and_source_and_a_wrong_one_says_what_is_expected():
    assert recipe.parse_arm("raw-store") == recipe.Arm("raw", "store")
    with pytest.raises(argparse.ArgumentTypeError, match="DATA-SOURCE"):
        recipe.parse_arm("regen-offline")


def test_a_phase_keeps_back_only_the_reserve_of_later_phases_in_the_same_call():
    reserve = {"merge": 60, "train": 150, "evaluate": 200}
    assert recipe.reserve_after("regen", ["split", "target", "regen"], reserve) == 0
    assert recipe.reserve_after("regen", ["regen", "merge", "train"], reserve) == 210
    assert recipe.reserve_after("train", ["merge", "train", "export", "evaluate"], reserve) == 200


def test_a_calls_reserves_can_be_set_per_phase_and_a_wrong_one_says_what_is_expected():
    a = recipe.parser().parse_args(["--phases", "train,export,evaluate", "--phase-reserve", "evaluate=90",
                      "--phase-reserve", "export=20"])
    c = recipe.Ctx(a, None, None, None, deadline=1000.0)  # type: ignore[arg-type]
    with_defaults = recipe.Ctx(recipe.parser().parse_args(["--phases", "train,export,evaluate"]), None, None, None, 1000.0)  # type: ignore[arg-type]
    assert with_defaults.left("train") - c.left("train") == pytest.approx(-130, abs=1)  # 240 kept back, now 110
    with pytest.raises(argparse.ArgumentTypeError, match="PHASE=SECONDS"):
        recipe.parse_reserve("evaluate=soon")
    with pytest.raises(argparse.ArgumentTypeError, match="PHASE=SECONDS"):
        recipe.parse_reserve("regen=10")


def test_training_is_sized_to_the_time_left_and_never_past_the_passes_asked():
    common = dict(fixed=0, batch_tokens=16384, setup_s=45, rate=30000)
    steps, _ = recipe.size_steps(epochs=4, largest_tokens=24_000_000, left_s=445, **common)
    assert steps == int(400 * 30000 / 16384)  # the time is the bound: 732 steps, not 4 passes' 5,860
    steps, _ = recipe.size_steps(epochs=2, largest_tokens=163_840, left_s=445, **common)
    assert steps == 20  # two passes over a small set, though the time would allow more
    assert recipe.size_steps(epochs=4, largest_tokens=10**9, left_s=10, **common)[0] == 1
    assert recipe.size_steps(epochs=4, largest_tokens=10**9, left_s=10, **{**common, "fixed": 300})[0] == 300


def test_the_raw_arm_keeps_the_prompts_of_regenerated_samples_even_several_per_prompt():
    sources = {"QNsJBj3_0", "QNsJBj3_1", "chitchat:a07edb12", "a1", "b7"}
    regen = ["QNsJBj3_0", "chitchat:a07edb12#1", "chitchat:a07edb12#2", "a1-s3", "b77", "zz#1"]
    assert recipe.matching_sources(regen, sources) == {"QNsJBj3_0", "chitchat:a07edb12", "a1"}


def test_the_last_calls_result_holds_every_earlier_calls_lines(tmp_path, capsys):
    history = tmp_path / "work" / "recipe.txt"
    history.parent.mkdir()
    first = recipe.RunLog(tmp_path / "call1.txt", history)
    first("regen: 511 records")
    second = recipe.RunLog(tmp_path / "call2.txt", history)
    second("train: 700 steps")
    assert (tmp_path / "call2.txt").read_text() == "regen: 511 records\ntrain: 700 steps\n"
    assert (tmp_path / "call1.txt").read_text() == "regen: 511 records\n"
    third = recipe.RunLog(tmp_path / "call3.txt", history)
    third("split: another seed")
    third.restart()  # a new split: the lines about the old data go
    third("regen: 90 records")
    assert (tmp_path / "call3.txt").read_text() == history.read_text() == "split: another seed\nregen: 90 records\n"


def _opts(tmp_path: Path, *extra: str) -> argparse.Namespace:
    a = recipe.parser().parse_args(["--work", str(tmp_path), *extra])
    a.device = "cuda"
    return a


def test_online_arms_train_from_the_merged_set_and_store_arms_from_a_5000_sample_store(tmp_path):
    a = _opts(tmp_path)
    online = recipe.train_cmd(a, recipe.Arm("regen", "online"), tmp_path / "t", 700)
    assert online[online.index("--data") + 1] == str(tmp_path / "data" / "merged-regen.jsonl")
    assert "--store" not in online
    store = recipe.train_cmd(a, recipe.Arm("regen", "store"), tmp_path / "t", 700)
    assert store[store.index("--store") + 1] == str(tmp_path / "store-regen") and "--data" not in store
    extract = recipe.extract_cmd(a, recipe.Arm("regen", "store"), tmp_path / "t")
    assert extract[extract.index("--limit") + 1] == "5000" and "--store-dtype" not in extract


def test_trainers_sharing_one_gpu_each_hold_an_equal_share_of_it_and_the_trainer_takes_the_flag(tmp_path):
    from pipeline.train.__main__ import build_parser as train_parser
    from pipeline.train.errors import BadInput
    from pipeline.train.options import Options

    four = _opts(tmp_path, "--arms", "regen-online", "raw-online", "regen-store", "regen-fp8", "--parallel", "4")
    cmd = recipe.train_cmd(four, recipe.Arm("regen", "online"), tmp_path / "t", 700)
    assert cmd[cmd.index("--gpu-memory-share") + 1] == "0.237"  # four trainers at once: a quarter each, less slack
    fields = vars(train_parser().parse_args(cmd[3:]))
    fields.pop("estimate"), fields.pop("json")
    Options(**fields).validate()
    one_at_a_time = _opts(tmp_path, "--arms", "regen-online", "raw-online", "--parallel", "1")
    assert "--gpu-memory-share" not in recipe.train_cmd(one_at_a_time, recipe.Arm("raw", "online"), tmp_path, 700)
    on_cpu = _opts(tmp_path, "--arms", "regen-online", "raw-online", "--parallel", "2")
    on_cpu.device = "cpu"
    assert "--gpu-memory-share" not in recipe.train_cmd(on_cpu, recipe.Arm("raw", "online"), tmp_path, 700)
    for wrong in ("0", "1.5"):
        bad = Options(**{**fields, "gpu_memory_share": float(wrong)})
        with pytest.raises(BadInput, match=f"--gpu-memory-share {float(wrong)}: must be in 0.02..1.0"):
            bad.validate()


def test_the_dry_run_flag_is_the_only_way_an_online_arm_reads_a_store(tmp_path):
    a = _opts(tmp_path, "--online-via-store", "--store-dtype", "fp8")
    online = recipe.train_cmd(a, recipe.Arm("raw", "online"), tmp_path / "t", 700)
    assert online[online.index("--store") + 1] == str(tmp_path / "store-raw-all") and "--data" not in online
    extract = recipe.extract_cmd(a, recipe.Arm("raw", "online"), tmp_path / "t")
    assert "--limit" not in extract and extract[extract.index("--store-dtype") + 1] == "fp8"


def test_new_data_for_an_arm_forgets_its_run_drafter_and_figures_but_not_the_other_arms(tmp_path):
    a = _opts(tmp_path)
    log = recipe.RunLog(None, tmp_path / "recipe.txt")
    state = recipe.State(tmp_path)
    state.data["train_steps"] = 700
    c = recipe.Ctx(a, log, state, recipe.qb.Runner(tmp_path, log, 0.0, 1, {}), 0.0)
    regen, raw = recipe.Arm("regen", "online"), recipe.Arm("raw", "online")
    for arm in (regen, raw):
        (recipe.run_dir(a, arm) / "checkpoints").mkdir(parents=True)
        recipe.drafter_dir(a, arm).mkdir(parents=True)
        recipe.eval_report(a, arm, "sharegpt", 3).parent.mkdir(exist_ok=True)
        recipe.eval_report(a, arm, "sharegpt", 3).write_text("{}")
    recipe.forget_training(c, [regen])
    assert not recipe.run_dir(a, regen).exists() and not recipe.drafter_dir(a, regen).exists()
    assert not recipe.eval_report(a, regen, "sharegpt", 3).exists()
    assert recipe.run_dir(a, raw).exists() and recipe.eval_report(a, raw, "sharegpt", 3).exists()
    assert "train_steps" not in recipe.State(tmp_path).data  # sized again for the new data


def test_the_recipe_regenerates_with_looping_answers_cut_unless_told_to_keep_them(tmp_path):
    from pipeline.regenerate.options import parse

    cmd = recipe.regen_cmd(_opts(tmp_path), tmp_path / "t")
    assert "--trim-loops" in cmd and parse(cmd[3:]).trim_loops
    kept = recipe.regen_cmd(_opts(tmp_path, "--keep-loops"), tmp_path / "t")
    assert "--trim-loops" not in kept and not parse(kept[3:]).trim_loops


def test_a_regeneration_refused_for_other_settings_stops_the_call_instead_of_training_on_old_records(tmp_path):
    def run(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(Path(recipe.__file__)), "--small", "--small-records", "12",
                               "--work", str(tmp_path / "w"), "--arms", "regen-online", *more],
                              capture_output=True, text=True, timeout=600)

    first = run("--phases", "split,target,regen")
    assert first.returncode == 0, first.stdout + first.stderr
    again = run("--phases", "regen,merge", "--keep-loops")
    assert again.returncode != 0 and "trim_loops: True then, False now" in again.stderr, again.stdout + again.stderr
    assert "merge-regen" not in again.stdout  # nothing went on with the records made the other way


def test_a_resumed_runs_rate_is_its_last_sessions_and_the_line_says_so():
    whole = {"tokens": 37_662_927, "seconds": 339.0, "tokens_per_s": 47_646.0, "resumed_from": None,
             "tokens_this_session": 37_662_927}
    assert recipe.seen_line(whole) == "37,662,927 tokens seen in 339s (47,646 tok/s)"
    resumed = dict(whole, resumed_from=1447, tokens_this_session=16_152_000)
    line = recipe.seen_line(resumed)
    assert "37,662,927 tokens seen in all" in line
    assert "16,152,000 of them from step 1447 on, in 339s (47,646 tok/s)" in line
    assert "37,662,927 tokens seen in 339s" not in line


def test_training_past_its_share_of_the_call_is_stopped_there_even_an_arm_queued_behind_another(tmp_path, monkeypatch):
    """A run sized for two calls (--steps) trains until its share, checkpoints on the stop and
    resumes in the next call; the export and evaluation of this call keep their reserve."""
    a = _opts(tmp_path, "--phases", "train,export,evaluate", "--arms", "regen-online", "raw-online",
              "--parallel", "1", "--phase-reserve", "export=0", "--phase-reserve", "evaluate=0")
    log = recipe.RunLog(None, tmp_path / "recipe.txt")
    began = time.monotonic()
    share = 8.0  # the job's own minimum wait is 5 s, so the first arm's end is past it
    c = recipe.Ctx(a, log, recipe.State(tmp_path), recipe.qb.Runner(tmp_path, log, began + 600, 1, {}), began + share)
    monkeypatch.setattr(recipe, "arm_tokens", lambda a, arm: 1000)
    sleeps = {"regen-online": 3.0, "raw-online": 120.0}  # the second starts late and would run far past the share
    monkeypatch.setattr(recipe, "train_cmd", lambda a, arm, target, steps: [
        sys.executable, "-c", f"import time; time.sleep({sleeps[arm.name]})"])
    recipe.phase_train(c, tmp_path / "target")
    lines = (tmp_path / "recipe.txt").read_text()
    assert "train-regen-online" in lines and "ok" in lines.split("train-regen-online")[1].splitlines()[0]
    assert "stopped at its time limit" in lines.split("train-raw-online")[1].splitlines()[0]


def test_retraining_forgets_the_old_drafters_and_their_figures_so_the_report_shows_only_the_new_run(tmp_path, monkeypatch):
    a = _opts(tmp_path, "--phases", "train", "--retrain", "--steps", "5")
    log = recipe.RunLog(None, tmp_path / "recipe.txt")
    state = recipe.State(tmp_path)
    state.data["train_steps"] = 700
    began = time.monotonic()
    c = recipe.Ctx(a, log, state, recipe.qb.Runner(tmp_path, log, began + 600, 1, {}), began + 600)
    arm = a.arms[0]
    for made in (recipe.run_dir(a, arm) / "checkpoints", recipe.drafter_dir(a, arm), recipe.eval_report(a, arm, "sharegpt", 3).parent):
        made.mkdir(parents=True)
    recipe.eval_report(a, arm, "sharegpt", 3).write_text('{"acceptance_length": 4.0}')
    monkeypatch.setattr(recipe, "arm_tokens", lambda a, arm: 1000)
    monkeypatch.setattr(recipe, "train_cmd", lambda a, arm, target, steps: [sys.executable, "-c", "pass"])
    recipe.phase_train(c, tmp_path / "target")
    assert not recipe.eval_report(a, arm, "sharegpt", 3).exists() and not recipe.drafter_dir(a, arm).exists()
    assert recipe.State(tmp_path).data["train_steps"] == 5


@pytest.mark.parametrize("small", [False, True], ids=["device", "small"])
def test_a_later_call_trains_to_the_step_count_an_earlier_call_sized(tmp_path, monkeypatch, small):
    """Plan 2t then 3o: the second call resumes toward the first call's count (one lr schedule),
    whatever its own rate would size, and --small's own count does not replace it either."""
    argv = ["--work", str(tmp_path), "--phases", "train,export,evaluate", "--arms", "regen-online",
            "--train-rate", "78000"] + (["--small"] if small else [])
    a = recipe.with_small_defaults(recipe.parser().parse_args(argv), argv)
    state = recipe.State(tmp_path)
    state.data["train_steps"] = 2800
    state.save()
    log = recipe.RunLog(None, tmp_path / "recipe.txt")
    began = time.monotonic()
    c = recipe.Ctx(a, log, recipe.State(tmp_path), recipe.qb.Runner(tmp_path, log, began + 600, 1, {}), began + 600)
    monkeypatch.setattr(recipe, "arm_tokens", lambda a, arm: 1000)
    asked: list[int] = []
    monkeypatch.setattr(recipe, "train_cmd", lambda a, arm, target, steps: asked.append(steps) or [
        sys.executable, "-c", "pass"])
    recipe.phase_train(c, tmp_path / "target")
    assert asked == [2800]
    assert "2800 steps, as sized by an earlier call" in (tmp_path / "recipe.txt").read_text()


def test_a_job_run_again_in_a_later_call_keeps_the_earlier_runs_log_and_reports_only_its_own(tmp_path):
    """A training resumed in the next call reran under the same log name and wiped the first call's
    validation lines: the recipe's val history began at the resumed step."""
    log = recipe.RunLog(None, tmp_path / "recipe.txt")
    runner = recipe.qb.Runner(tmp_path, log, time.monotonic() + 600, 1, {})
    say = "import sys; print(sys.argv[1]); sys.exit(int(sys.argv[2]))"
    first = runner.phase("p", [recipe.qb.Job("train-x", [sys.executable, "-c", say, 'RESULT {"step": 821}', "0"])])
    assert first["train-x"].result() == {"step": 821}
    again = runner.phase("p", [recipe.qb.Job("train-x", [sys.executable, "-c", say, "Error: out of memory", "1"])])
    assert again["train-x"].result() == {} and again["train-x"].tail() == "Error: out of memory"
    whole = (tmp_path / "logs" / "train-x.log").read_text()
    assert 'RESULT {"step": 821}' in whole and whole.index("821") < whole.index("out of memory")


@pytest.mark.parametrize("steps", [700, 2829, 2830, 2831])
def test_a_recipe_training_validates_and_checkpoints_four_times_not_twice_at_its_end(tmp_path, steps):
    """2,829 steps saved every 2,829 // 4 = 707 validated and wrote a checkpoint at step 2,828 and
    again at 2,829: one validation of 200 samples and one checkpoint for nothing."""
    from pipeline.train.__main__ import build_parser as train_parser

    argv = recipe.train_cmd(_opts(tmp_path), recipe.Arm("regen", "online"), tmp_path / "t", steps)
    every = train_parser().parse_args(argv[3:]).save_every
    points = [s for s in range(1, steps + 1) if s % every == 0 or s == steps]
    assert len(points) == 4 and points[-1] == steps
