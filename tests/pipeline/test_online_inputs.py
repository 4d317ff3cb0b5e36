"""Online training proves its inputs belong together (issue 39): the target's config.json
against its weights (layers, hidden size, vocabulary, a cut file), for training and
extraction alike, and the merged file pinned for the whole run, so a rewrite mid-run stops it
with exit 2 naming the file instead of training on whatever the old offsets now hold."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from stage_call import call_stage

from pipeline.events import iter_events

BOUND = 240
OPTS = ["--batch-tokens", "256", "--max-len", "256", "--ttt-length", "1", "--val-share", "0", "--log-every", "1",
        "--device", "cpu"]


def _train(*argv: str) -> int:
    from pipeline.train.__main__ import main

    return main(list(argv))


def _lying(target: Path, tmp_path: Path, **change) -> Path:
    out = tmp_path / "target"
    shutil.copytree(target, out)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, **change}))
    return out


LIES = {"12 layers for 8 stored": {"num_hidden_layers": 12}, "7 layers for 8 stored": {"num_hidden_layers": 7},
        "a hidden size of 48 for 32": {"hidden_size": 48}, "a vocabulary of 256 for 128": {"vocab_size": 256}}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_online_training_refuses_a_target_whose_config_lies_about_its_weights(tiny_target, tiny_data, tmp_path, lie,
                                                                             capsys):
    change = LIES[lie]
    target = _lying(tiny_target, tmp_path, **change)
    rc = _train("--data", str(tiny_data.path), "--target", str(target), "--out", str(tmp_path / "run"), "--steps", "1",
                "--workers", "0", *OPTS)
    err = capsys.readouterr().err
    assert rc == 2, err
    key = next(iter(change))
    assert err.startswith(f"train: error: {target / 'config.json'}: {key} is {change[key]}, but the weights hold "), err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_offline_training_refuses_it_too_naming_the_config_not_the_store(tiny_target, reference_store, tmp_path,
                                                                         capsys):
    target = _lying(tiny_target, tmp_path, num_hidden_layers=12)
    rc = _train("--store", str(reference_store), "--target", str(target), "--out", str(tmp_path / "run"), "--steps",
                "1", "--workers", "0", *OPTS)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"train: error: {target / 'config.json'}: num_hidden_layers is 12, but the weights hold 8")


def test_online_training_and_extraction_refuse_a_cut_target_naming_the_file(tiny_target, tiny_data, tmp_path, capsys,
                                                                           run_extract):
    target = tmp_path / "target"
    shutil.copytree(tiny_target, target)
    weights = target / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 1000)
    rc = _train("--data", str(tiny_data.path), "--target", str(target), "--out", str(tmp_path / "run"), "--steps", "1",
                "--workers", "0", *OPTS)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"train: error: {weights}: ") and "the file is cut" in err, err
    proc = run_extract(target, tiny_data.path, tmp_path / "store")
    assert proc.returncode == 2, proc.stderr
    assert f"{weights}: " in proc.stderr and "the file is cut" in proc.stderr


@pytest.mark.parametrize("lie", ["12 layers for 8 stored", "a hidden size of 48 for 32"])
def test_extraction_refuses_a_target_whose_config_lies_about_its_weights(tiny_target, tiny_data, tmp_path, run_extract,
                                                                        lie):
    target = _lying(tiny_target, tmp_path, **LIES[lie])
    proc = run_extract(target, tiny_data.path, tmp_path / "store")
    assert proc.returncode == 2, proc.stderr
    assert f"{target / 'config.json'}: {next(iter(LIES[lie]))} is " in proc.stderr
    assert not (tmp_path / "store" / "manifest.jsonl").exists()


def _reverse_every_record(path: Path, keep_mtime: bool) -> None:
    """The same bytes count, other records: each record's token ids in reverse order."""
    st = path.stat()
    lines = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        rec["input_ids"].reverse()
        lines.append(json.dumps(rec))
    with open(path, "r+") as f:  # in place, as a merge writing over it would
        f.write("".join(x + "\n" for x in lines))
    assert path.stat().st_size == st.st_size
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _rewrite_after_step_2(events: Path, data: Path, keep_mtime: bool, ended: threading.Event,
                          failed: list[BaseException]) -> None:
    """Beside the run: once it has trained step 2, its merged file rewritten in place."""
    deadline = time.monotonic() + BOUND
    try:
        while not (events.exists() and any(e.kind == "metric" and e.get("step", 0) >= 2 for e in iter_events(events))):
            assert not ended.is_set(), "the run ended before its second step"
            assert time.monotonic() < deadline, "no step within the bound"
            time.sleep(0.05)  # wait-ok: polling the events file with a deadline
        _reverse_every_record(data, keep_mtime)
    except BaseException as e:  # the test says it, after the run
        failed.append(e)


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["rewritten", "rewritten-mtime-kept"])
def test_a_merged_file_rewritten_mid_run_stops_online_training_naming_it(tiny_data, tiny_target, tmp_path,
                                                                         keep_mtime):
    """train's main() in this worker (stage_call.py; its loader worker a process of its own), the
    file rewritten from a thread beside it."""
    data = tmp_path / "train.jsonl"
    shutil.copy(tiny_data.path, data)
    shutil.copy(tiny_data.stats, tmp_path / "train.stats.json")
    events, out = tmp_path / "events.jsonl", tmp_path / "run"
    argv = ["--data", data, "--target", tiny_target, "--out", out, "--steps", "400", "--workers", "1", "--prefetch",
            "1", *OPTS]
    ended, failed = threading.Event(), []
    rewriter = threading.Thread(target=_rewrite_after_step_2, args=(events, data, keep_mtime, ended, failed))
    rewriter.start()
    try:
        done = call_stage("train", argv, env={"EAGLE3_EVENTS": str(events), "EAGLE3_TRAIN_STEP_DELAY": "0.3"})
    finally:
        ended.set()
        rewriter.join(BOUND)
    assert not failed, failed
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"train: error: {data}: changed since this run indexed it"), done.stderr
    trained = max(e.get("step", 0) for e in iter_events(events) if e.kind == "metric")
    assert trained < 400


def _online(data: Path, target: Path, out: Path, *more: str) -> int:
    return _train("--data", str(data), "--target", str(target), "--out", str(out), "--steps", "1", "--workers", "0",
                  *OPTS, *more)


def test_online_training_refuses_a_target_whose_tokenizer_is_a_permutation_of_the_datas(tiny_target, tiny_data,
                                                                                      tmp_path, capsys, xt):
    import random

    target = tmp_path / "target"
    shutil.copytree(tiny_target, target)
    order = list(range(xt.VOCAB))
    random.Random(0).shuffle(order)
    xt.tiny_tokenizer(order).save_pretrained(target)  # the same size, other text for the same ids
    rc = _online(tiny_data.path, target, tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"train: error: {tiny_data.path} was merged with the tokenizer tiny (tok1:") and \
        f", {tiny_data.stats}) but the target {target} has tok1:" in err, err
    assert len(err.strip().splitlines()) == 1


def test_online_training_refuses_data_merged_with_another_tokenizer_and_says_both(tiny_target, tiny_data, tmp_path,
                                                                                 capsys):
    from dataclasses import replace

    from pipeline.records import merge_stats

    data = tmp_path / "train.jsonl"
    shutil.copy(tiny_data.path, data)
    other = replace(merge_stats.read_stats(tiny_data.stats), tokenizer="/models/other", tokenizer_identity="tok1:" + "0" * 32)
    merge_stats.write_stats(tmp_path / "train.stats.json", other)
    rc = _online(data, tiny_target, tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"merged with the tokenizer /models/other (tok1:{'0' * 32}" in err and f"the target {tiny_target} has" in err


def test_online_training_without_the_datas_stats_is_refused_unless_told_to_go_unchecked(tiny_target, tiny_data,
                                                                                       tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    shutil.copy(tiny_data.path, data)
    assert _online(data, tiny_target, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'train.stats.json'}: missing; online training reads merge's stats" in err
    assert "--stats none" in err
    assert _online(data, tiny_target, tmp_path / "run", "--stats", str(tiny_data.stats)) == 0  # the same bytes
    capsys.readouterr()
    with open(data, "a") as f:
        f.write(data.read_text().splitlines()[0] + "\n")
    assert _online(data, tiny_target, tmp_path / "run2", "--stats", str(tiny_data.stats)) == 2
    assert f"{tiny_data.stats}: dataset_sha256 " in capsys.readouterr().err
    assert _online(data, tiny_target, tmp_path / "run3", "--stats", "none") == 0
    assert "--stats none: the tokenizer" in capsys.readouterr().out


def _extract(target: Path, data: Path, stats: Path, out: Path) -> int:
    from pipeline.extract.__main__ import main

    return main(["--backend", "hf", "--model", str(target), "--data", str(data), "--stats", str(stats), "--out",
                 str(out), "--reserve", "0", "--device", "cpu"])


def test_extraction_refuses_data_merged_with_another_tokenizer_before_it_writes_a_state(tiny_target, tiny_data,
                                                                                       tmp_path, capsys, xt):
    """The same lie offline: states extracted from ids the target reads as other text, then a
    drafter trained on them. Checked where extract reads merge's stats (--stats)."""
    import random

    target = tmp_path / "target"
    shutil.copytree(tiny_target, target)
    order = list(range(xt.VOCAB))
    random.Random(0).shuffle(order)
    xt.tiny_tokenizer(order).save_pretrained(target)
    rc = _extract(target, tiny_data.path, tiny_data.stats, tmp_path / "store")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"extract: error: {tiny_data.path} was merged with the tokenizer tiny (tok1:") and \
        f", {tiny_data.stats}) but the target {target} has tok1:" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "store" / "manifest.jsonl").exists()


def test_extraction_refuses_stats_that_record_no_tokenizer(tiny_target, tiny_data, tmp_path, capsys):
    from dataclasses import replace

    from pipeline.records import merge_stats

    stats = tmp_path / "train.stats.json"
    merge_stats.write_stats(stats, replace(merge_stats.read_stats(tiny_data.stats), tokenizer_identity=None))
    rc = _extract(tiny_target, tiny_data.path, stats, tmp_path / "store")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{stats}: records no tokenizer_identity" in err and "extract without --stats" in err, err
    assert not (tmp_path / "store" / "manifest.jsonl").exists()


def _resaved(target: Path, tmp_path: Path, edit) -> Path:
    """A copy of the target whose weights file is resaved after `edit(tensors)`; its config is
    left as it was, so the layers, hidden size and vocabulary still agree with the headers."""
    from safetensors.torch import load_file, save_file

    out = tmp_path / "target"
    shutil.copytree(target, out)
    weights = load_file(out / "model.safetensors")
    edit(weights)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _drop_an_mlp(w):
    del w["model.layers.5.mlp.up_proj.weight"]


def _narrow_a_projection(w):
    import torch

    w["model.layers.3.self_attn.q_proj.weight"] = torch.zeros(16, 32)


RANDOM = {"a tensor missing": (_drop_an_mlp, "the weights lack model.layers.5.mlp.up_proj.weight"),
          "a tensor of another shape": (_narrow_a_projection,
                                        "the weights hold model.layers.3.self_attn.q_proj.weight as [16, 32], its "
                                        "config.json describes [32, 32]")}


@pytest.mark.parametrize("what", sorted(RANDOM))
def test_a_target_whose_weights_would_leave_a_tensor_random_is_refused_naming_it(tiny_target, tiny_data, tmp_path,
                                                                                 capsys, what):
    """A missing tensor trained online with exit 0 on a random MLP (transformers initialises it
    and, at the verbosity the stages set, says nothing); one of another shape was exit 1 with
    transformers' 'look at the above report'."""
    edit, says = RANDOM[what]
    target = _resaved(tiny_target, tmp_path, edit)
    rc = _online(tiny_data.path, target, tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"train: error: {target} (--target): {says}") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert _extract(target, tiny_data.path, tiny_data.stats, tmp_path / "store") == 2
    assert f"{target} (--model): {says}" in capsys.readouterr().err


def test_a_record_read_back_after_its_file_was_rewritten_is_refused_not_returned(tiny_data, tmp_path):
    """Extraction reads records by the offsets it indexed (a loader thread, the SGLang client);
    a merge rewriting the file in place, its size and mtime kept, puts other records there."""
    from pipeline.merged_dataset import index_dataset
    from pipeline.program_edge import BadInput

    data = tmp_path / "train.jsonl"
    shutil.copy(tiny_data.path, data)
    index = index_dataset(data)
    _reverse_every_record(data, keep_mtime=True)
    reader = index.open()
    try:
        with pytest.raises(BadInput, match=f"^{data}: changed since this run indexed it \\(record 1 at byte "):
            reader.read(1)
    finally:
        reader.close()


def test_a_target_whose_tokenizer_file_is_damaged_is_refused_naming_it(tiny_target, tiny_data, tmp_path, capsys):
    """A tokenizer.json that parses as JSON but lacks what the tokenizer needs raised KeyError
    out of the tokenizer check: exit 1 naming nothing."""
    target = tmp_path / "target"
    shutil.copytree(tiny_target, target)
    (target / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "WordLevel", "vocab": 5}}))
    rc = _online(tiny_data.path, target, tmp_path / "run")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"train: error: {target} (--target): no tokenizer loads from it (KeyError: "), err
    assert _extract(target, tiny_data.path, tiny_data.stats, tmp_path / "store") == 2
    assert f"{target} (--model): no tokenizer loads from it" in capsys.readouterr().err
