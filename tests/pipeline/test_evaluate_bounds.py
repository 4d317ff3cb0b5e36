"""Evaluate's inputs are bounded by what they mean (issue 39): an empty --configs and a sweep of
thousands of settings are refused before anything loads, a sweep says up front how much it
will decode and, after its first prompt, how long the rest will take, and a server's figures
must agree with each other before any is reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_evaluate as base  # noqa: E402

from pipeline.evaluate import verifier  # noqa: E402
from pipeline.evaluate.__main__ import main  # noqa: E402

tiny, sglang_standin = base.tiny, base.sglang_standin


@pytest.fixture()
def nothing_loads(monkeypatch):
    """A target load fails the test: what is refused must be refused before it."""

    def load(*_a, **_k):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(verifier, "Target", load)


@pytest.mark.parametrize("configs", [[""], [" "], ["", ""]])
def test_an_empty_configs_exits_2_before_anything_loads(tiny, nothing_loads, capsys, configs):
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
               "--configs", *configs])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--configs names no setting" in err and len(err.strip().splitlines()) == 1


def test_more_settings_than_the_bound_exit_2_before_anything_loads_unless_raised(tiny, nothing_loads, capsys):
    many = [f"{s},1,{s + 1}" for s in range(1, 9)] + [f"{s},4,{d}" for s in (2, 3, 4) for d in range(2, 22)]
    assert len(many) == 68
    where = ["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"])]
    rc = main([*where, "--configs", *many])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--configs gives {len(many)} settings, more than --max-settings 64" in err

    main([*where, "--configs", *many, "--max-settings", str(len(many))])
    assert "the target was loaded" in capsys.readouterr().err  # raised: past the bound, on to the loading


def test_a_sweep_says_how_much_it_decodes_and_estimates_the_rest_after_its_first_prompt(tiny, capsys):
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
               "--configs", "2,1,3", "3,1,4", "--limit", "3", "--max-new-tokens", "4", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "6 speculative decodes beside 3 greedy ones" in out
    assert "the first 1 prompt(s) took" in out and "more for the other 2" in out


def _answer(monkeypatch, meta: dict) -> None:
    def post(self):
        data = json.dumps({"text": "x", "meta_info": meta}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    monkeypatch.setattr(base._Sglang, "do_POST", post)


@pytest.mark.parametrize(("meta", "more", "says"), [
    ({"completion_tokens": 8, "spec_verify_ct": 4, "spec_accept_length": 50}, [], "is 2 per verify forward"),
    ({"completion_tokens": 10, "spec_verify_ct": 2, "spec_accept_length": 5.0}, ["--num-steps", "3"],
     "commits at most 4 tokens (--num-steps 3 + 1)"),
    ({"completion_tokens": 12, "spec_verify_ct": 2, "spec_accept_length": 6.0, "spec_num_proposed_drafts": 6}, [],
     "commits at most 4 tokens (the 4 draft tokens"),
    ({"completion_tokens": 40, "spec_verify_ct": 10, "spec_accept_length": 4.0}, [], "more than the 12 asked"),
    ({"completion_tokens": 3, "spec_verify_ct": 6, "spec_accept_length": 1.0}, [], "at least one token"),
], ids=["length-50-from-8-tokens-in-4-forwards", "past-num-steps", "past-the-draft-tokens", "past-max-new-tokens",
        "more-forwards-than-tokens"])
def test_a_servers_figures_that_disagree_are_refused_and_nothing_is_written(tiny, tmp_path, sglang_standin,
                                                                            monkeypatch, capsys, meta, more, says):
    _srv, url = sglang_standin
    _answer(monkeypatch, meta)
    report = tmp_path / "server.json"
    rc = main(["--server", url, "--prompts", str(tiny["prompts"]), "--max-new-tokens", "12", "--report", str(report),
               *more])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and "cannot be trusted" in err and len(err.strip().splitlines()) == 1
    assert not report.exists()


def test_a_server_whose_figures_agree_within_the_bounds_is_reported(tiny, tmp_path, sglang_standin, monkeypatch):
    _srv, url = sglang_standin
    # a perfect drafter at 3 steps: the prefill's token plus 4 a verify forward
    _answer(monkeypatch, {"completion_tokens": 9, "spec_verify_ct": 2, "spec_accept_length": 4.5,
                          "spec_num_proposed_drafts": 6})
    assert main(["--server", url, "--prompts", str(tiny["prompts"]), "--max-new-tokens", "12", "--num-steps", "3",
                 "--report", str(tmp_path / "r.json")]) == 0
