"""Merge's input bounds: one huge record costs neither minutes nor gigabytes, and says so."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.chat.loss_mask import encode
from pipeline.chat.synthetic import generate, write_jsonl
from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.merge.__main__ import main as merge_main
from pipeline.merge.chunks import char_bound
from pipeline.records.merge_stats import MergeStats, read_stats

REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 2 * 2**30  # address space: torch and transformers map about 0.6 GiB; the record once took 20 GB


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds")
    records = generate(0, quick=True)["arithmetic"][:30]
    texts = [m["content"] for r in records for m in r["conversations"]] + ["apple banana cherry"] * 20
    tok = build_tokenizer(texts, vocab_size=400, chat_template=CHAT_TEMPLATE)
    tok.save_pretrained(root / "tok")
    return {"root": root, "records": records, "tok": tok}


def _huge(chars: int, rid: str = "huge") -> dict:
    return {"id": rid, "conversations": [
        {"role": "user", "content": "Repeat the fruit."},
        {"role": "assistant", "content": ("apple banana cherry " * (chars // 20 + 1))[:chars]},
    ]}


def _stats(out: Path) -> MergeStats:
    return read_stats(out.with_name("train.stats.json"))


def test_a_50mb_record_is_dropped_unread_under_a_memory_limit_with_a_clear_message(small, tmp_path):
    src = tmp_path / "raw" / "chat.jsonl"
    src.parent.mkdir()
    with open(src, "w") as f:
        for i, rec in enumerate(small["records"]):
            f.write(json.dumps(rec) + "\n")
            if i == 10:
                f.write(json.dumps(_huge(50_000_000)) + "\n")
    out = tmp_path / "out" / "train.jsonl"

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.merge", "--tokenizer", str(small["root"] / "tok"), "--out", str(out),
         "--workers", "1", str(src)],
        cwd=REPO, capture_output=True, text=True, timeout=240, preexec_fn=limit_memory, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"1 lines longer than {16 * 2**20} bytes skipped unread" in proc.stdout
    assert f"{src}:12" in proc.stdout
    stats = _stats(out)
    assert stats.sources["chat"].lines_too_long == 1
    assert stats.records == len(small["records"])
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert "huge" not in ids and len(ids) == len(small["records"])


def test_text_beyond_what_max_len_could_keep_is_dropped_before_tokenizing(small, tmp_path, capsys):
    bound = char_bound(small["tok"], 64)
    src = tmp_path / "chat.jsonl"
    write_jsonl(src, [*small["records"][:5], _huge(bound + 1, "over"), _huge(bound // 4, "under")])
    out = tmp_path / "o" / "train.jsonl"
    argv = ["--tokenizer", str(small["root"] / "tok"), "--out", str(out), "--workers", "1", "--max-len", "64",
            "--on-long", "drop", str(src)]
    assert merge_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"1 samples hold more text than --max-len 64 tokens could ever keep (over {bound} characters)" in printed
    assert "dropped before tokenizing (e.g. over (" in printed
    s = _stats(out).sources["chat"]
    assert s.over_char_bound == 1 and s.dropped_too_long >= 2  # `under` is still too long once tokenized
    assert _stats(out).char_bound == bound
    assert not {"over", "under"} & {json.loads(line)["id"] for line in out.read_text().splitlines()}


def test_truncating_cuts_the_text_first_and_keeps_the_same_first_tokens(small, tmp_path):
    tok = small["tok"]
    bound = char_bound(tok, 64)
    rec = _huge(bound * 3, "long")
    src = tmp_path / "chat.jsonl"
    write_jsonl(src, [rec])
    out = tmp_path / "o" / "train.jsonl"
    argv = ["--tokenizer", str(small["root"] / "tok"), "--out", str(out), "--workers", "1", "--max-len", "64", str(src)]
    assert merge_main(argv) == 0
    got = json.loads(out.read_text())
    whole = encode(tok, rec["conversations"])
    assert got["input_ids"] == whole.input_ids[:64] and got["loss_mask"] == whole.loss_mask[:64]
    s = _stats(out).sources["chat"]
    assert s.over_char_bound == 1 and s.truncated == 1 and s.records == 1


def test_a_skipped_line_keeps_the_line_numbers_of_the_records_after_it(small, tmp_path):
    src = tmp_path / "chat.jsonl"
    lines = [json.dumps({k: v for k, v in r.items() if k != "id"}) for r in small["records"][:4]]
    lines.insert(1, json.dumps(_huge(5000)))
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o" / "train.jsonl"
    argv = ["--tokenizer", str(small["root"] / "tok"), "--out", str(out), "--workers", "1",
            "--max-line-bytes", "2000", str(src)]
    assert merge_main(argv) == 0
    ids = sorted(json.loads(line)["id"] for line in out.read_text().splitlines())
    assert ids == ["chat:1", "chat:3", "chat:4", "chat:5"]
    assert _stats(out).sources["chat"].lines_too_long == 1
