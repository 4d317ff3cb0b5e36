"""Merge on dirty real-world sources: bad records are skipped and counted, never fatal one by one;
a mostly-bad file stops the merge; JSON arrays stream, cut or whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.merge.__main__ import main as merge_main


def _good(i: int, **extra) -> dict:
    return {"id": f"g{i}", "conversations": [
        {"from": "human", "value": f"What is {i} plus {i}?"},
        {"from": "gpt", "value": f"{i} plus {i} is {2 * i}."},
    ], **extra}


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tok")
    texts = [m["value"] for i in range(40) for m in _good(i)["conversations"]] + ["Go on.", "And then?"] * 10
    build_tokenizer(texts, vocab_size=300, chat_template=CHAT_TEMPLATE).save_pretrained(root)
    return root


def _merge(tok: Path, tmp_path: Path, *args: str) -> tuple[int, Path]:
    out = tmp_path / "out" / "train.jsonl"
    return merge_main(["--tokenizer", str(tok), "--out", str(out), "--workers", "1", *args]), out


def _ids(out: Path) -> list[str]:
    return sorted(json.loads(line)["id"] for line in out.read_text().splitlines())


def _stats(out: Path) -> dict:
    return json.loads(out.with_name("train.stats.json").read_text())


def _write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _write_array(path: Path, records: list) -> Path:
    """Pretty-printed like ShareGPT V3: one element starts on each `  {` line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[\n" + ",\n".join(json.dumps(r, indent=2) for r in records) + "\n]\n")
    return path


def test_an_empty_conversation_among_many_good_ones_is_skipped_and_named(tok, tmp_path, capsys):
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(i) for i in range(30)] + [{"id": "empty", "conversations": []}])
    rc, out = _merge(tok, tmp_path, str(src))
    assert rc == 0, capsys.readouterr().err
    assert len(_ids(out)) == 30
    stats = _stats(out)["sources"]["chat"]
    assert stats["input"]["skipped"] == {"no_messages": 1} and stats["skipped"] == 1
    assert stats["input"]["examples"]["no_messages"] == [f"{src}:31 (id empty)"]
    assert f"1 of 31 records skipped: no_messages (e.g. {src}:31 (id empty)" in capsys.readouterr().out


def test_sharegpt_extra_roles_are_assistants_by_default_and_an_unknown_role_is_skipped(tok, tmp_path, capsys):
    bing = {"id": "bing", "conversations": [{"from": "human", "value": "What is 1 plus 1?"},
                                             {"from": "bing", "value": "1 plus 1 is 2."}]}
    robot = {"id": "robot", "conversations": [{"from": "human", "value": "hi"}, {"from": "robot", "value": "beep"}]}
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(i) for i in range(30)] + [bing, robot])
    rc, out = _merge(tok, tmp_path, str(src))
    assert rc == 0
    assert "bing" in _ids(out) and "robot" not in _ids(out)
    assert _stats(out)["sources"]["chat"]["input"]["skipped"] == {"unknown_role": 1}
    assert "conversations[1].from" in capsys.readouterr().out

    rc, out = _merge(tok, tmp_path, "--role-map", "robot=assistant", str(src))
    assert rc == 0
    assert "robot" in _ids(out) and "bing" not in _ids(out), "an explicit --role-map replaces the default"


def test_a_record_that_opens_with_the_assistant_is_counted_kept_by_default_and_droppable(tok, tmp_path, capsys):
    chunk = {"id": "cont_1", "conversations": [{"from": "gpt", "value": "2 plus 2 is 4."},
                                                {"from": "human", "value": "And then?"},
                                                {"from": "gpt", "value": "3 plus 3 is 6."}]}
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(1), chunk, _good(2)])
    rc, out = _merge(tok, tmp_path, str(src))
    assert rc == 0
    assert _ids(out) == ["cont_1", "g1", "g2"]
    info = _stats(out)["sources"]["chat"]["input"]
    assert info["assistant_first"] == {"records": 1, "action": "keep"} and info["invalid"] == 0
    assert f"1 records open with an assistant turn: kept (e.g. {src}:2 (id cont_1))" in capsys.readouterr().out

    rc, out = _merge(tok, tmp_path, "--on-assistant-first", "drop", str(src))
    assert rc == 0
    assert _ids(out) == ["g1", "g2"]
    assert _stats(out)["sources"]["chat"]["input"]["assistant_first"] == {"records": 1, "action": "drop"}


def test_a_duplicate_id_keeps_the_first_usable_record(tok, tmp_path, capsys):
    broken_first = {"id": "d", "conversations": []}  # ShareGPT V3's 123 duplicates are all like this
    first = {"id": "d", "conversations": [{"from": "human", "value": "What is 1 plus 1?"}, {"from": "gpt", "value": "first"}]}
    second = {"id": "d", "conversations": [{"from": "human", "value": "What is 1 plus 1?"}, {"from": "gpt", "value": "second"}]}
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(i) for i in range(30)] + [broken_first, first, second])
    rc, out = _merge(tok, tmp_path, str(src))
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    kept = [r for r in rows if r["id"] == "d"]
    assert len(kept) == 1
    decoded = AutoTokenizer.from_pretrained(tok).decode(kept[0]["input_ids"])
    assert "first" in decoded and "second" not in decoded
    info = _stats(out)["sources"]["chat"]["input"]
    assert info["duplicate_id"] == {"records": 1, "action": "first usable kept", "kept_after_a_skipped_one": 1}
    assert info["skipped"] == {"no_messages": 1}
    printed = capsys.readouterr().out
    assert f"1 records repeat an earlier record's id: the first usable one kept (e.g. {src}:33 (id d))" in printed
    assert f"1 records repeat the id of an earlier, skipped record: kept, as the first usable one (e.g. {src}:32" in printed


def test_consecutive_turns_of_one_role_are_joined_or_the_record_dropped(tok, tmp_path):
    twice = {"id": "twice", "conversations": [{"from": "human", "value": "What is 1 plus 1?"},
                                               {"from": "gpt", "value": "1 plus 1"},
                                               {"from": "chatgpt", "value": "is 2."}]}
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(1), twice])
    rc, out = _merge(tok, tmp_path, str(src))
    assert rc == 0
    t = AutoTokenizer.from_pretrained(tok)
    row = next(json.loads(line) for line in out.read_text().splitlines() if '"twice"' in line)
    learnt = t.decode([i for i, m in zip(row["input_ids"], row["loss_mask"]) if m])
    assert learnt == "1 plus 1\n\nis 2.<|end|>"
    assert _stats(out)["sources"]["chat"]["input"]["same_role"] == {"records": 1, "action": "join"}

    rc, out = _merge(tok, tmp_path, "--same-role", "drop", str(src))
    assert rc == 0 and _ids(out) == ["g1"]


def test_a_mostly_invalid_file_exits_2_naming_the_file_the_share_and_the_reasons(tok, tmp_path, capsys):
    bad = [{"id": f"b{i}", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": ""}]}
           for i in range(8)]
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(i) for i in range(12)] + bad + [{"prompt": "x"}])
    rc, out = _merge(tok, tmp_path, str(src))
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{src}: 9 of 21 records (42.9%) are unusable, more than --max-invalid 0.05" in err
    assert "8 empty_value" in err and "1 no_messages" in err and "keys found: 'prompt'" in err
    assert not out.exists() and not list(out.parent.iterdir())

    rc, out = _merge(tok, tmp_path, "--max-invalid", "0.5", str(src))
    assert rc == 0 and len(_ids(out)) == 12


def test_policies_never_count_toward_max_invalid(tok, tmp_path):
    opener = {"conversations": [{"from": "gpt", "value": "1 plus 1 is 2."}, {"from": "human", "value": "Go on."},
                                {"from": "gpt", "value": "2 plus 2 is 4."}]}
    records = [_good(i) for i in range(10)] + [{**opener, "id": f"o{i}"} for i in range(10)] + [_good(i) for i in range(10)]
    src = _write_jsonl(tmp_path / "chat.jsonl", records)
    rc, out = _merge(tok, tmp_path, "--on-assistant-first", "drop", "--max-invalid", "0", str(src))
    assert rc == 0
    info = _stats(out)["sources"]["chat"]["input"]
    assert info["invalid"] == 0 and info["assistant_first"]["records"] == 10 and info["duplicate_id"]["records"] == 10
    assert len(_ids(out)) == 10


def test_strict_stops_at_the_first_unusable_record(tok, tmp_path, capsys):
    src = _write_jsonl(tmp_path / "chat.jsonl", [_good(i) for i in range(50)] + [{"id": "e", "conversations": []}])
    rc, out = _merge(tok, tmp_path, "--strict", str(src))
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err == f"merge: error: {src}:51: field 'conversations': must be a non-empty list of messages, got []"
    assert not out.exists()


def test_a_cut_json_array_yields_every_complete_record_and_names_the_byte_where_it_ends(tok, tmp_path, capsys):
    whole = _write_array(tmp_path / "whole.json", [_good(i) for i in range(20)])
    text = whole.read_bytes()
    start = text.index(b'{\n  "id": "g19"')
    cut = tmp_path / "raw" / "sharegpt.json"
    cut.parent.mkdir()
    cut.write_bytes(text[: start + 40])
    rc, out = _merge(tok, tmp_path, str(cut))
    assert rc == 0, capsys.readouterr().err
    assert _ids(out) == sorted(f"g{i}" for i in range(19))
    info = _stats(out)["sources"]["sharegpt"]["input"]
    line = text[:start].count(b"\n") + 1
    assert info["cut"] == [{"file": str(cut), "byte": start, "line": line}]
    assert f"the JSON array is cut at byte {start} (line {line})" in capsys.readouterr().out

    rc, _ = _merge(tok, tmp_path, "--strict", str(cut))
    assert rc == 2 and f"cut at byte {start}" in capsys.readouterr().err


def test_a_folder_reads_its_json_arrays_along_with_its_jsonl_files(tok, tmp_path):
    raw = tmp_path / "raw"
    _write_array(raw / "sharegpt.json", [_good(i) for i in range(5)])
    _write_jsonl(raw / "chat.jsonl", [_good(i) for i in range(5, 8)])
    (raw / "notes.txt").write_text("not a source")
    rc, out = _merge(tok, tmp_path, str(raw))
    assert rc == 0
    stats = _stats(out)
    assert set(stats["sources"]) == {"sharegpt", "chat"}
    assert stats["sources"]["sharegpt"]["records"] == 5 and stats["sources"]["chat"]["records"] == 3
    ids_without = [{k: v for k, v in r.items() if k != "id"} for r in [_good(1), _good(2)]]
    _write_array(raw / "sharegpt.json", ids_without)
    rc, out = _merge(tok, tmp_path, str(raw))
    assert rc == 0 and "sharegpt:1" in _ids(out) and "sharegpt:2" in _ids(out), "an array record's id is its position"


def test_an_array_element_over_the_bound_stops_with_its_byte_offset(tok, tmp_path, capsys):
    huge = {"id": "huge", "conversations": [{"from": "human", "value": "x" * 5000}, {"from": "gpt", "value": "y"}]}
    src = _write_array(tmp_path / "big.json", [_good(1), huge, _good(2)])
    start = src.read_bytes().index(b'{\n  "id": "huge"')
    rc, _ = _merge(tok, tmp_path, "--max-line-bytes", "2000", str(src))
    assert rc == 2
    err = capsys.readouterr().err
    assert f"byte {start}: an element is larger than 2000 bytes" in err
