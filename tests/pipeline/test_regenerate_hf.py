"""`python -m pipeline.regenerate --backend hf` on a tiny local Llama with the demo's chat
template: answers are the target's own (greedy equals `model.generate`), and a sampled run
gives the same file whatever the batch size, so a resumed run matches an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stage_call import StageResult, call_stage
from tiny_chat_target import build_chat_target, greedy_answers

from pipeline.records import regenerate_stats

MAX_NEW = 6


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory) -> Path:
    return build_chat_target(tmp_path_factory.mktemp("chat-target") / "tiny-chat-llama")


@pytest.fixture(scope="module")
def chats(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chats") / "chats.jsonl"
    recs = []
    for i in range(7):
        conv = [{"role": "system", "content": "be short"}] if i == 2 else []
        conv += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "old"}]
        if i % 3 == 0:
            conv += [{"role": "user", "content": f"and question {i * 7}?"}, {"role": "assistant", "content": "old"}]
        recs.append({"id": f"r{i}", "conversations": conv})
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def regen(model: Path, src: Path, out: Path, *more: str) -> StageResult:
    return call_stage("regenerate", [src, "--out", out, "--backend", "hf", "--model", model, "--max-new-tokens",
                                     MAX_NEW, "--seed", "0", *more])


def test_hf_greedy_answers_are_what_the_target_generates_with_its_chat_template(tmp_path, chat_target, chats):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = regen(chat_target, chats, tmp_path / "out.jsonl", "--temperature", "0", "--batch-size", "4")
    assert p.returncode == 0, p.stderr
    got = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in got] == [f"r{i}" for i in range(7)]
    tok = AutoTokenizer.from_pretrained(chat_target)
    model = AutoModelForCausalLM.from_pretrained(chat_target).eval()
    for rec in got:
        conv = rec["conversations"]
        assert [m["role"] for m in conv if m["role"] != "system"] == ["user", "assistant"] * (len(conv) // 2)
        got_answers = [m["content"] for m in conv if m["role"] == "assistant"]
        assert got_answers == greedy_answers(model, tok, conv, MAX_NEW), rec["id"]
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.answers == 10 and stats.records_out == 7


@pytest.mark.slow  # four runs of the program: about 40 s on a loaded 2-core machine
def test_hf_sampled_answers_do_not_depend_on_the_batch_size_so_resume_matches(tmp_path, chat_target, chats):
    a = regen(chat_target, chats, tmp_path / "a.jsonl", "--temperature", "1.0", "--top-p", "0.9", "--batch-size", "3")
    b = regen(chat_target, chats, tmp_path / "b.jsonl", "--temperature", "1.0", "--top-p", "0.9", "--batch-size", "1",
              "--limit", "4")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    b = regen(chat_target, chats, tmp_path / "b.jsonl", "--temperature", "1.0", "--top-p", "0.9", "--batch-size", "2")
    assert b.returncode == 0, b.stderr
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    c = regen(chat_target, chats, tmp_path / "c.jsonl", "--temperature", "1.0", "--top-p", "0.9", "--seed", "1")
    assert c.returncode == 0, c.stderr
    assert (tmp_path / "c.jsonl").read_bytes() != (tmp_path / "a.jsonl").read_bytes()


def test_a_target_without_a_chat_template_is_refused_saying_what_is_missing(tmp_path, chat_target, chats):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(chat_target, bare)
    cfg = json.loads((bare / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(cfg))
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    p = regen(bare, chats, tmp_path / "out.jsonl")
    assert p.returncode == 2, p.stderr
    assert "has no chat template" in p.stderr and "Traceback" not in p.stderr


def test_a_prompt_over_max_prompt_tokens_is_skipped_as_prompt_too_long(tmp_path, chat_target, chats):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_target)
    first = tok.apply_chat_template([{"role": "user", "content": "question 0"}], add_generation_prompt=True)
    limit = len(first if isinstance(first, list) else first["input_ids"]) + 2  # first turns fit, second turns not
    p = regen(chat_target, chats, tmp_path / "out.jsonl", "--temperature", "0", "--max-prompt-tokens", str(limit))
    assert p.returncode == 0, p.stderr
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    ids = [json.loads(x)["id"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    two_turns = {"r0", "r3", "r6"}
    assert stats.failures.get("prompt_too_long", 0) >= len(two_turns) and not two_turns & set(ids)
    assert f"more than --max-prompt-tokens {limit}" in stats.failure_examples["prompt_too_long"][0]


def test_a_record_of_more_turns_than_the_target_can_hold_fails_before_any_answer(tmp_path, chat_target):
    """A record of 10,000 short turns cost 276 s of answers before the turn that no longer fit:
    its last turn's prompt, with the shortest answers there can be, is measured first."""
    src = tmp_path / "chats.jsonl"
    many = [m for i in range(60) for m in ({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"})]
    src.write_text(json.dumps({"id": "long", "conversations": many}) + "\n"
                   + json.dumps({"id": "short", "conversations": many[:2]}) + "\n")
    events = tmp_path / "events.jsonl"
    p = call_stage("regenerate", [src, "--out", tmp_path / "out.jsonl", "--backend", "hf", "--model", chat_target,
                                  "--max-new-tokens", MAX_NEW, "--temperature", "0", "--batch-size", "2"],
                   env={"EAGLE3_EVENTS": str(events)})
    assert p.returncode == 0, p.stderr
    stats = json.loads((tmp_path / "out.stats.json").read_text())
    assert stats["failures"] == {"prompt_too_long": 1} and stats["records_out"] == 1
    assert stats["failure_examples"]["prompt_too_long"][0].startswith("long: its last turn of 60, even with")
    progress = [json.loads(x) for x in events.read_text().splitlines() if '"progress"' in x]
    assert progress[-1]["answers"] == 1  # the short record's one answer: none was generated for the long one


def test_a_target_whose_weights_will_not_load_is_refused_naming_the_folder(tmp_path, chat_target, chats):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(chat_target, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # a copy cut short
    p = regen(broken, chats, tmp_path / "out.jsonl")
    assert p.returncode == 2, p.stderr
    assert f"cannot load the target from {broken} (--model)" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out.jsonl").exists()
