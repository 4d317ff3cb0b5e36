"""bench/quality's inputs: the held-out split and the ShareGPT cleaning the whole comparison rests on.

The full `bench/quality.py --small` run takes minutes on two cores (a dozen stage processes), so
it is left to the bench; these tests pin what would silently spoil its figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import quality_inputs as qi  # noqa: E402


def _split(text: str, **kw):
    opts = dict(seed=0, heldout_share=0.3, train_limit=10_000, heldout_limit=10_000, max_user_turns=3,
                max_prompt_chars=10_000)
    return qi.split_sharegpt(text, **{**opts, **kw})


def test_held_out_prompts_never_reach_training_even_when_an_id_repeats():
    again = [r for _, r in qi.iter_array(qi.small_sharegpt(80))]
    twice = json.dumps(again + [{**r, "conversations": r["conversations"][::-1]} for r in again])
    s = _split(twice)
    train_ids = {r["id"] for r in s.train}
    held_ids = {r["id"] for r in s.heldout}
    assert train_ids and held_ids
    assert not train_ids & held_ids
    assert s.reasons["duplicate_id"] == len(again)
    assert len(train_ids) == len(s.train)  # the first of a repeated id kept, never both


def test_the_same_seed_splits_the_same_and_another_seed_differently():
    text = qi.small_sharegpt(80)
    a, b, c = _split(text), _split(text), _split(text, seed=1)
    assert [r["id"] for r in a.heldout] == [r["id"] for r in b.heldout]
    assert {r["id"] for r in a.heldout} != {r["id"] for r in c.heldout}


def test_a_cut_array_yields_every_complete_record_and_stops_at_the_cut():
    whole = [{"id": str(i), "conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
             for i in range(5)]
    text = json.dumps(whole)
    cut = text[: text.index('"q4"') + 2]
    assert [r["id"] for _, r in qi.iter_array(cut)] == ["0", "1", "2", "3"]
    assert [r["id"] for _, r in qi.iter_array(text)] == ["0", "1", "2", "3", "4"]


def test_sharegpt_assistant_names_leading_answers_and_repeated_roles_become_one_clean_chat():
    rec = {"conversations": [{"from": "gpt", "value": "hi!"}, {"from": "human", "value": "a"},
                             {"from": "human", "value": "b"}, {"from": "chatgpt", "value": "c"},
                             {"from": "human", "value": "d"}, {"from": "bing", "value": "e"},
                             {"from": "human", "value": "unanswered"}]}
    turns, why = qi.clean(rec, max_user_turns=5)
    assert why == "ok"
    assert turns == [{"role": "user", "content": "a\n\nb"}, {"role": "assistant", "content": "c"},
                     {"role": "user", "content": "d"}, {"role": "assistant", "content": "e"}]
    assert qi.clean(rec, max_user_turns=1)[0] == turns[:2]


def test_records_no_stage_could_train_on_are_counted_by_reason():
    text = json.dumps([{"id": "r", "conversations": [{"from": "robot", "value": "x"}]},
                       {"id": "e", "conversations": [{"from": "human", "value": " "}, {"from": "gpt", "value": "a"}]},
                       {"id": "n", "conversations": [{"from": "human", "value": "q"}]},
                       {"id": "m", "text": "no turns"}])
    s = _split(text, heldout_share=0.0)
    assert s.train == [] and s.read == 4
    assert {k: v for k, v in s.reasons.items()} == {"unknown_role": 1, "empty_value": 1, "no_assistant": 1,
                                                    "no_messages": 1}


def test_a_record_repeating_the_id_of_an_empty_one_is_kept():
    text = json.dumps([{"id": "x", "conversations": []},
                       {"id": "x", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}])
    s = _split(text, heldout_share=0.0)
    assert [r["conversations"][0]["content"] for r in s.train] == ["q"]
    assert "duplicate_id" not in s.reasons
