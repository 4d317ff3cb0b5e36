"""Chat dataset shapes users have: ours, OpenAI `messages`, ShareGPT; ids derived when absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.chat_records import RecordError, parse_record
from pipeline.chat_template import CHAT_TEMPLATE
from pipeline.merge import main as merge_main
from pipeline.tokenizer_build import build_tokenizer

EXPECTED = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 plus 2?"},
    {"role": "assistant", "content": "2 plus 2 is 4."},
]
SHAPES = {
    "conversations": {"id": "c-1", "conversations": EXPECTED},
    "messages": {"messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is 2 "}, {"type": "text", "text": "plus 2?"}]},
        {"role": "assistant", "content": "2 plus 2 is 4."},
    ]},
    "sharegpt": {"id": 7, "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "What is 2 plus 2?"},
        {"from": "gpt", "value": "2 plus 2 is 4."},
    ]},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_dataset_shape_reads_as_the_same_conversation(shape):
    rec = parse_record(json.dumps(SHAPES[shape]), "in.jsonl", 4, "mysource")
    assert rec.conversations == EXPECTED
    assert rec.shape == shape
    assert rec.id == {"conversations": "c-1", "messages": "mysource:4", "sharegpt": "7"}[shape]


@pytest.mark.parametrize(
    ("obj", "wanted"),
    [
        ({"prompt": "hi", "response": "yo"}, "in.jsonl:3: unknown chat record shape (keys found: 'prompt', 'response')"),
        ({"conversations": [{"from": "robot", "value": "x"}]}, "field 'conversations[0].from'"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "field 'messages[0].role'"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "only text parts"),
        ({"id": "", "messages": [{"role": "user", "content": "x"}]}, "field 'id'"),
    ],
)
def test_an_unknown_or_broken_shape_is_named_with_file_line_and_keys(obj, wanted):
    with pytest.raises(RecordError) as err:
        parse_record(json.dumps(obj), "in.jsonl", 3, "s")
    assert wanted in str(err.value)


def test_merge_reads_every_shape_names_it_in_the_stats_and_derives_stable_ids(tmp_path):
    tok = build_tokenizer([m["content"] for m in EXPECTED] * 4, vocab_size=300, chat_template=CHAT_TEMPLATE)
    tok.save_pretrained(tmp_path / "tok")
    raw = tmp_path / "raw"
    raw.mkdir()
    for shape, obj in SHAPES.items():
        copies = [{**obj, "id": f"{obj['id']}-{i}"} if "id" in obj else obj for i in range(3)]
        (raw / f"{shape}.jsonl").write_text("".join(json.dumps(c) + "\n" for c in copies))
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run / "train.jsonl"
        assert merge_main(["--tokenizer", str(tmp_path / "tok"), "--out", str(out), "--workers", "1", str(raw)]) == 0
        outs.append(out)
    stats = json.loads(outs[0].with_name("train.stats.json").read_text())
    assert {name: s["shape"] for name, s in stats["sources"].items()} == {
        "conversations": "conversations", "messages": "messages", "sharegpt": "sharegpt"}
    assert stats["sources"]["messages"]["shapes"] == {"messages": 3}
    records = [json.loads(line) for line in outs[0].read_text().splitlines()]
    assert len(records) == 9
    assert len({tuple(r["input_ids"]) for r in records}) == 1, "every shape must render to the same tokens"
    ids = sorted(r["id"] for r in records if r["source"] == "messages")
    assert ids == ["messages:1", "messages:2", "messages:3"]
    assert Path(outs[0]).read_bytes() == Path(outs[1]).read_bytes()


def test_merge_refuses_an_unknown_shape_naming_file_line_and_keys(tmp_path, capsys):
    tok = build_tokenizer(["a b c"] * 4, vocab_size=280, chat_template=CHAT_TEMPLATE)
    tok.save_pretrained(tmp_path / "tok")
    src = tmp_path / "odd.jsonl"
    src.write_text(json.dumps(SHAPES["messages"]) + "\n" + json.dumps({"instruction": "x", "output": "y"}) + "\n")
    rc = merge_main(["--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "o.jsonl"), "--workers", "1", str(src)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{src}:2" in err and "'instruction', 'output'" in err and "messages" in err
