"""Evaluate trusts nothing from outside (issue 25): a server's impossible figures, a prompt
far too long to tokenize, a drafter config.json edited after export, prompt ids the target
does not have. Each is a clear refusal naming the cause, never a figure."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_evaluate as base  # noqa: E402

from pipeline.evaluate import prompts as held_out_prompts  # noqa: E402
from pipeline.evaluate.__main__ import main  # noqa: E402
from pipeline.evaluate.options import parse  # noqa: E402

tiny, sglang_standin = base.tiny, base.sglang_standin  # the same fixtures, one definition


@pytest.mark.parametrize("length", ["NaN", "-5", "1.8e308", "Infinity"])
def test_a_server_reporting_an_impossible_acceptance_length_is_refused_and_nothing_is_written(
        tiny, tmp_path, sglang_standin, monkeypatch, capsys, length):
    _srv, url = sglang_standin

    def post(self):  # the figure spelled as a hostile server would (Python's json reads NaN and Infinity)
        data = ('{"text": "x", "meta_info": {"completion_tokens": 12, "spec_verify_ct": 4, '
                f'"spec_accept_length": {length}}}}}').encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    monkeypatch.setattr(base._Sglang, "do_POST", post)
    report = tmp_path / "server.json"
    rc = main(["--server", url, "--prompts", str(tiny["prompts"]), "--max-new-tokens", "12", "--report", str(report)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "spec_accept_length" in err and "cannot be trusted" in err and "Traceback" not in err
    assert not report.exists()


class CountingTokenizer:
    """Renders a chat as its text and records the longest text it was asked to tokenize."""

    longest = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(m["content"] for m in messages)

    def __call__(self, text, add_special_tokens=False):
        CountingTokenizer.longest = max(CountingTokenizer.longest, len(text))
        return {"input_ids": [1] * (len(text) // 4 + 1)}


def test_a_ten_megabyte_prompt_is_skipped_as_too_long_without_being_tokenized(tmp_path, monkeypatch):
    prompts = tmp_path / "prompts.jsonl"
    huge = "word " * (2 << 20)  # 10 MiB of text
    with open(prompts, "w") as f:
        f.write(json.dumps({"id": "huge", "conversations": [{"from": "human", "value": huge}]}) + "\n")
        f.write(json.dumps({"id": "small", "conversations": [{"from": "human", "value": "hello there"}]}) + "\n")
    monkeypatch.setattr(held_out_prompts, "tokenizer_of", lambda target: CountingTokenizer())
    CountingTokenizer.longest = 0
    chosen = held_out_prompts.held_out(parse(["--prompts", str(prompts), "--target", str(tmp_path)]), 200)
    assert [p.id for p in chosen.prompts] == ["small"] and chosen.too_long == 1
    assert CountingTokenizer.longest < 1 << 20, "the 10 MiB prompt reached the tokenizer"


def test_a_drafter_whose_config_was_edited_after_export_is_refused(tiny, tmp_path, capsys):
    bad = tmp_path / "drafter"
    shutil.copytree(tiny["drafter"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    # a lie that still loads: the same weight shapes, another split of heads
    cfg["num_attention_heads"], cfg["head_dim"] = cfg["num_attention_heads"] * 2, cfg["head_dim"] // 2
    (bad / "config.json").write_text(json.dumps(cfg))
    rc = main(["--drafter", str(bad), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
               "--limit", "1", "--max-new-tokens", "4", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{bad / 'config.json'}: differs from what export wrote" in err and "eagle3-export.json" in err


@pytest.mark.parametrize("bad_id", [10 ** 6, -3])
def test_prompt_ids_outside_the_targets_vocabulary_are_refused_naming_the_file(tiny, tmp_path, capsys, bad_id):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "p-odd", "input_ids": [5, 9, bad_id, 7], "loss_mask": [0, 0, 0, 1]}) + "\n")
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(prompts),
               "--max-new-tokens", "4", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--prompts {prompts}: prompt p-odd holds token id {bad_id}" in err and "Traceback" not in err
