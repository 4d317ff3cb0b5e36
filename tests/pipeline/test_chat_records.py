"""Chat dataset shapes users have: ours, OpenAI `messages`, ShareGPT; ids derived when absent;
and the source reader that skips and counts what it cannot use."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from pipeline.chat.records import RecordError, parse_record
from pipeline.chat.sources import SourceError, SourcePolicy, SourceReport, iter_records, parse_role_map, source_files
from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.merge.__main__ import main as merge_main
from pipeline.program_edge import BadInput
from pipeline.records.merge_stats import read_stats

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
    stats = read_stats(outs[0].with_name("train.stats.json"))
    assert {name: s.shape for name, s in stats.sources.items()} == {
        "conversations": "conversations", "messages": "messages", "sharegpt": "sharegpt"}
    assert stats.sources["messages"].shapes == {"messages": 3}
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


# -- pipeline.chat.sources: the reader that skips and counts instead of stopping ---------------

def _read(path: Path, **policy) -> tuple[list, SourceReport]:
    report = SourceReport()
    return list(iter_records(path, path.stem, SourcePolicy(**policy), report)), report


def _answer(role_key: str = "from") -> list[dict]:
    if role_key == "from":
        return [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]
    return [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


BAD = {
    "no_messages": {"id": "x", "conversations": []},
    "unknown_role": {"id": "x", "conversations": [{"from": "human", "value": "hi"}, {"from": "wizard", "value": "!"}]},
    "empty_value": {"id": "x", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "  "}]},
    "no_assistant": {"id": "x", "conversations": [{"from": "human", "value": "hi"}]},
    "not_text": {"id": "x", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]},
                                         {"role": "assistant", "content": "a cat"}]},
}


@pytest.mark.parametrize("reason", list(BAD))
def test_each_kind_of_unusable_record_is_skipped_counted_and_shown_with_file_line_and_id(tmp_path, reason):
    src = tmp_path / "chat.jsonl"
    good = [{"id": f"g{i}", "conversations": _answer()} for i in range(3)]
    src.write_text("".join(json.dumps(r) + "\n" for r in [good[0], BAD[reason], *good[1:]]))
    records, report = _read(src, max_invalid=1.0)
    assert [r.id for r in records] == ["g0", "g1", "g2"]
    assert dict(report.skipped) == {reason: 1} and report.records == 4 and report.usable == 3
    assert report.to_record().examples[reason] == (f"{src}:2 (id x)",)
    assert any(w.startswith(f"1 of 4 records skipped: {reason} (e.g. {src}:2 (id x)") for w in report.warnings())
    assert report.invalid_share() == 0.25
    with pytest.raises(RecordError) as err:
        _read(src, strict=True)
    assert err.value.reason == reason and f"{src}:2" in str(err.value)


def test_past_max_invalid_the_source_is_refused_at_its_end(tmp_path):
    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps(BAD["no_messages"]) + "\n" for _ in range(2)) + json.dumps(
        {"id": "g", "conversations": _answer()}) + "\n")
    with pytest.raises(SourceError, match=r"2 of 3 records \(66.7%\) are unusable, more than --max-invalid 0.5"):
        _read(src, max_invalid=0.5)
    records, _ = _read(src, max_invalid=0.7)
    assert [r.id for r in records] == ["g"]


def test_the_role_map_names_extra_speakers_and_rejects_a_role_we_do_not_have():
    assert parse_role_map("bing=assistant, bard = assistant,") == {"bing": "assistant", "bard": "assistant"}
    assert parse_role_map("") == {}
    with pytest.raises(BadInput, match="--role-map entry 'bot=robot'"):
        parse_role_map("bot=robot")
    with pytest.raises(ValueError, match="role map bot=robot"):
        SourcePolicy(role_map={"bot": "robot"})


def test_a_json_array_is_read_in_bounded_memory(tmp_path):
    """A 48 MB array peaks at about 8 MB of Python allocations (json.load: several times the file):
    a read block, one record, and the set of ids seen, the one part that grows (~150 bytes a record)."""
    src = tmp_path / "big.json"
    answer = "lorem ipsum dolor sit amet " * 80
    n = 0
    with open(src, "w") as f:
        f.write("[")
        while f.tell() < 48 * 2**20:
            rec = {"id": f"r{n}", "conversations": [{"from": "human", "value": f"question {n}"},
                                                     {"from": "gpt", "value": answer}]}
            f.write(("," if n else "") + "\n  " + json.dumps(rec))
            n += 1
        f.write("\n]\n")
    size = src.stat().st_size
    tracemalloc.start()
    try:
        count = 0
        report = SourceReport()
        for _ in iter_records(src, "big", SourcePolicy(), report):
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n and report.cuts == []
    assert peak < size / 4, f"peak {peak} bytes for a {size}-byte array"


def test_an_array_with_broken_json_inside_stops_naming_the_byte(tmp_path):
    src = tmp_path / "bad.json"
    good = json.dumps({"id": "g", "conversations": _answer()})
    src.write_text(f"[\n{good},\n{{\"id\": \"b\", \"conversations\": [}} ],\n{good}\n]")
    with pytest.raises(BadInput) as err:  # json_stream's StreamError: the stage edge's exit 2
        _read(src)
    offset = len(f"[\n{good},\n") + len('{"id": "b", "conversations": [')
    assert f"{src}:3: byte {offset}: not valid JSON" in str(err.value)


def test_a_json_lines_file_named_json_and_an_array_named_jsonl_read_by_their_content(tmp_path):
    lines = tmp_path / "a.json"
    lines.write_text(json.dumps({"id": "l", "conversations": _answer()}) + "\n")
    array = tmp_path / "b.jsonl"
    array.write_text("\ufeff" + json.dumps([{"id": "r", "messages": _answer("role")}]))
    assert [r.id for r in _read(lines)[0]] == ["l"]
    assert [r.id for r in _read(array)[0]] == ["r"]
    assert [p.name for p in source_files(tmp_path)] == ["a.json", "b.jsonl"]
