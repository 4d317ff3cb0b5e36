"""`--trim-loops`: an answer stops at the token that completes an exact loop and keeps the
loop's first two periods; answers without one are written whole, and the next turn of a chat
answers the cut answer, as it would have been served."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stage_call import StageResult, call_stage
from tiny_chat_target import build_chat_target

from pipeline.records import regenerate_stats
from pipeline.regenerate.loops import loop_tail, trim

MAX_NEW = 48


def test_a_tail_repeating_one_unit_three_times_is_cut_after_two_periods():
    looped = [1, 2, 3, 4] + [5, 6, 7] * 6 + [5, 6]
    assert loop_tail(looped) == (4, 3)
    assert trim(looped) == [1, 2, 3, 4, 5, 6, 7, 5, 6, 7]
    assert trim([9] * 20) == [9, 9]  # the shortest unit, from where the run starts
    assert trim([4] + [1, 2] * 10) == [4, 1, 2, 1, 2]


def test_an_answer_without_a_loop_at_its_end_is_left_whole():
    assert trim([1, 2, 3, 1, 2, 3]) == [1, 2, 3, 1, 2, 3]  # two periods are not a loop yet
    middle = [5, 6] * 10 + [7, 8, 9]
    assert trim(middle) == middle  # a loop the answer left
    number = [11, 12, 13, 14] + [0] * 5
    assert trim(number) == number  # "00000" at the bound is too short to be a loop
    assert trim([]) == [] and trim([3]) == [3]


class OneLook:
    """A decoder that watches for loops, whose one look finds slot 0's answer finished:
    `tokens`, ended or not."""

    lanes = [range(0, 1)]
    loops = object()  # what the backend's decoder has when --trim-loops is on

    def __init__(self, tokens: list[int], ended: bool) -> None:
        self.look = ([0], [tokens], [ended], 0)
        self.released: list[int] = []

    def finished(self):
        return self.look

    def release(self, slots: list[int]) -> None:
        self.released += slots


@pytest.mark.parametrize("ended", [False, True])
def test_only_an_answer_that_ran_to_the_bound_is_cut_and_its_next_turn_sees_the_cut_answer(ended):
    from pipeline.regenerate.backends.hf_schedule import Scheduler
    from pipeline.regenerate.conversation import Chat
    from pipeline.regenerate.sink import MemorySink

    answer = [1, 2] + [7, 8, 9] * 8 + ([99] if ended else [])  # 99: the end token, never in the text
    decode = lambda toks: " ".join(map(str, toks))  # noqa: E731
    s = Scheduler(OneLook(answer, ended), lambda msgs: [], decode, lambda chat: 0, MemorySink(), 1, 8)
    chat = Chat.start(0, "r0", [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "old"},
                                {"role": "user", "content": "q2"}, {"role": "assistant", "content": "old"}])
    s.slots.chat[0], s.slots.prompt[0] = chat, [5, 5]
    assert s._collect() == [0]  # the chat has a second turn to answer
    said = chat.prompt()[1]["content"]
    if ended:
        assert said == decode(answer[:-1]) and chat.cut == 0 and chat.cut_answers == 0
    else:
        assert said == "1 2 7 8 9 7 8 9" and chat.cut == len(answer) - 8 and chat.cut_answers == 1
    assert chat.prompt()[2] == {"role": "user", "content": "q2"}
    assert s.slots.held[0] == [5, 5] + answer[:-1]  # the slot's cache holds what it generated, cut or not


def _conv(i: int, turns: int = 1) -> list[dict[str, str]]:
    conv = [{"role": "user", "content": f"question {i} " + "words " * i}, {"role": "assistant", "content": "old"}]
    for t in range(turns - 1):
        conv += [{"role": "user", "content": f"and {t} more?"}, {"role": "assistant", "content": "old"}]
    return conv


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return build_chat_target(tmp_path_factory.mktemp("loops-target") / "tiny", layers=2)


def _expected(target: Path, conv: list[dict[str, str]]) -> tuple[list[str], int, int, int]:
    """model.generate's greedy answers, each stopped at the first token that completes a loop
    and cut with `trim` before the next turn sees it; (answers, answers cut, tokens cut,
    tokens generated)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target).eval()
    chat: list[dict[str, str]] = []
    answers, cut, tokens, generated = [], 0, 0, 0
    for m in conv:
        if m["role"] != "assistant":
            chat.append(m)
            continue
        ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.inference_mode():
            seq = model.generate(ids["input_ids"], max_new_tokens=MAX_NEW, do_sample=False,
                                 pad_token_id=tok.pad_token_id)[0, ids["input_ids"].shape[1]:].tolist()
        assert seq[-1] != tok.eos_token_id and len(seq) == MAX_NEW  # the tiny target runs to the bound
        seq = next((seq[:n] for n in range(1, len(seq) + 1) if loop_tail(seq[:n])), seq)
        kept = trim(seq)
        cut, tokens, generated = cut + (len(kept) < len(seq)), tokens + len(seq) - len(kept), generated + len(seq)
        answers.append(tok.decode(kept, skip_special_tokens=True))
        chat.append({"role": "assistant", "content": answers[-1]})
    return answers, cut, tokens, generated


def _regen(model: Path, src: Path, out: Path, *more: str) -> StageResult:
    return call_stage("regenerate", [src, "--out", out, "--backend", "hf", "--model", model, "--max-new-tokens",
                                     MAX_NEW, "--temperature", "0", "--batch-size", "3", *more])


def test_looping_answers_are_cut_and_the_next_turn_answers_the_cut_one(tmp_path, target):
    convs = [_conv(i) for i in range(6)] + [_conv(4, turns=2)]
    src = tmp_path / "chats.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{k}", "conversations": c}) + "\n" for k, c in enumerate(convs)))
    want = [_expected(target, c) for c in convs]
    assert 0 < sum(w[1] for w in want[:6]) < 6  # some answers loop at their end and some do not

    p = _regen(target, src, tmp_path / "out.jsonl", "--trim-loops")
    assert p.returncode == 0, p.stderr
    got = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    answers = [[m["content"] for m in r["conversations"] if m["role"] == "assistant"] for r in got]
    assert answers == [w[0] for w in want]
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.loops_cut == sum(w[1] for w in want) and stats.loop_tokens_cut == sum(w[2] for w in want)
    assert stats.generated_tokens == sum(w[3] for w in want) < MAX_NEW * 8  # a loop stops its answer
    assert f"{stats.loops_cut} looping answers cut, {stats.loop_tokens_cut} tokens" in p.stdout

    whole = _regen(target, src, tmp_path / "whole.jsonl")
    assert whole.returncode == 0, whole.stderr
    first = [json.loads(x)["conversations"][1]["content"] for x in (tmp_path / "whole.jsonl").read_text().splitlines()]
    assert all(f.startswith(a[0]) for f, a in zip(first, answers))
    assert any(len(f) > len(a[0]) for f, a in zip(first, answers))  # without the flag, loops are written whole


def test_resuming_with_the_other_choice_is_refused_and_a_server_run_cannot_ask_for_it(tmp_path, target):
    src = tmp_path / "chats.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "conversations": _conv(i)}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    assert _regen(target, src, out, "--trim-loops", "--limit", "1").returncode == 0
    p = _regen(target, src, out)
    assert p.returncode == 2 and "trim_loops: True then, False now" in p.stderr, p.stderr
    old = json.loads((tmp_path / "out.stats.json").read_text())  # as a regenerate before the flag wrote it:
    del old["options"]["trim_loops"], old["record"], old["version"]  # no trim_loops, no record's tag or version
    (tmp_path / "out.stats.json").write_text(json.dumps(old))
    assert _regen(target, src, out).returncode == 0
    s = call_stage("regenerate", [src, "--out", tmp_path / "s.jsonl", "--backend", "server", "--server",
                                  "http://127.0.0.1:9", "--served-model", "m", "--trim-loops"])
    assert s.returncode == 2 and "--trim-loops is for --backend hf" in s.stderr, s.stderr


def test_the_device_sees_a_loop_at_the_very_token_the_host_rule_would():
    """The decoder's per-token watch (on the device, inside the captured step) and `loop_tail`
    (on the host) are one rule: fed an answer token by token, the watch fires at the first
    prefix `loop_tail` calls a loop, for loops of every shape and none."""
    import random

    import torch

    from pipeline.regenerate.backends.decoder import LoopWatch

    rng = random.Random(1)
    fired = 0
    for _ in range(200):
        unit = [rng.randrange(5) for _ in range(rng.randrange(1, 20))]
        seq = ([rng.randrange(50) for _ in range(rng.randrange(0, 10))] + unit * 10)[:60]
        watch = LoopWatch(1, torch.device("cpu"))
        out = torch.zeros(1, len(seq), dtype=torch.int64)
        out[0, 0] = seq[0]  # the prefill's token: the watch starts with the second
        for g in range(1, len(seq)):
            hit = bool(watch.see(out, torch.tensor([g]), torch.tensor([seq[g]]), torch.tensor([True]))[0])
            out[0, g] = seq[g]
            assert hit == (loop_tail(seq[: g + 1]) is not None), seq[: g + 1]
            fired += hit
    assert fired > 100
