"""merge and regenerate follow the output rule: an --out that is or sits inside an input, or an
existing file the stage did not write, is refused with exit 2 and left exactly as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.chat.synthetic import generate, write_jsonl
from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.merge.__main__ import main as merge_main
from pipeline.regenerate.__main__ import main as regen_main

FOREIGN = b'{"note": "somebody\'s notes"}\n{"last line without a newline": 1'


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("rule")
    sources = generate(0, quick=True)
    (root / "raw").mkdir()
    for name, records in sources.items():
        write_jsonl(root / "raw" / f"{name}.jsonl", records)
    texts = [m["content"] for recs in sources.values() for r in recs for m in r["conversations"]]
    build_tokenizer(texts, vocab_size=512, chat_template=CHAT_TEMPLATE).save_pretrained(root / "tok")
    return {"root": root, "raw": root / "raw", "tok": root / "tok"}


def _merge(raw, out: Path) -> int:
    return merge_main(["--tokenizer", str(raw["tok"]), "--out", str(out), "--workers", "1", "--", str(raw["raw"])])


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_merge_refuses_an_out_inside_its_source_folder_and_touches_nothing(raw, capsys):
    before = _tree(raw["raw"])
    assert _merge(raw, raw["raw"] / "merged.jsonl") == 2
    assert "sits inside the input" in capsys.readouterr().err
    assert _tree(raw["raw"]) == before


def test_merge_refuses_to_replace_a_file_it_did_not_write(raw, tmp_path, capsys):
    out = tmp_path / "notes.jsonl"
    out.write_bytes(FOREIGN)
    assert _merge(raw, out) == 2
    assert "was not written by merge" in capsys.readouterr().err
    assert out.read_bytes() == FOREIGN


def test_merge_replaces_its_own_output_on_a_rerun(raw, tmp_path):
    out = tmp_path / "merged" / "train.jsonl"
    assert _merge(raw, out) == 0
    first = out.read_bytes()
    assert _merge(raw, out) == 0
    assert out.read_bytes() == first


def _regen(src: Path, out: Path) -> int:
    # the refusal comes before any server is asked: port 9 (discard) is never reached
    return regen_main([str(src), "--out", str(out), "--backend", "server", "--server", "http://127.0.0.1:9",
                       "--served-model", "m"])


def test_regenerate_refuses_to_resume_into_a_file_it_did_not_write_and_never_cuts_its_last_line(tmp_path, capsys):
    src = tmp_path / "chats.jsonl"
    src.write_text(json.dumps({"id": "a", "conversations": [{"from": "human", "value": "hi"},
                                                            {"from": "gpt", "value": "hello"}]}) + "\n")
    out = tmp_path / "notes.jsonl"
    out.write_bytes(FOREIGN)
    assert _regen(src, out) == 2
    assert "was not written by regenerate" in capsys.readouterr().err
    assert out.read_bytes() == FOREIGN


def test_regenerate_refuses_an_out_that_is_its_source(tmp_path, capsys):
    src = tmp_path / "chats.jsonl"
    src.write_bytes(FOREIGN)
    assert _regen(src, src) == 2
    assert "is the input" in capsys.readouterr().err
    assert src.read_bytes() == FOREIGN
