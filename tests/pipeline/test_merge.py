"""pipeline.merge: tokenized, assistant-masked, shuffled training set plus its stats."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.chat.loss_mask import METHOD_MARKERS, METHOD_PREFIX_DIFF, encode
from pipeline.chat.synthetic import LONG_SOURCE, generate, write_jsonl
from pipeline.chat.template import CHAT_TEMPLATE, CHAT_TEMPLATE_WITH_GENERATION
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.events import read_events
from pipeline.merge.__main__ import main as merge_main
from pipeline.records.merge_stats import MergeStats, read_stats

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Quick demo sources plus two tokenizers that differ only in their chat template."""
    root = tmp_path_factory.mktemp("merge")
    sources = generate(0, quick=True)
    raw = root / "raw"
    raw.mkdir()
    for name, records in sources.items():
        write_jsonl(raw / f"{name}.jsonl", records)
    texts = [m["content"] for recs in sources.values() for r in recs for m in r["conversations"]]
    toks = {}
    for label, template in (("plain", CHAT_TEMPLATE), ("marked", CHAT_TEMPLATE_WITH_GENERATION)):
        tok = build_tokenizer(texts, vocab_size=512, chat_template=template)
        tok.save_pretrained(root / label)
        toks[label] = tok
    by_id = {r["id"]: r for recs in sources.values() for r in recs}
    return {"root": root, "raw": raw, "toks": toks, "by_id": by_id, "counts": {k: len(v) for k, v in sources.items()}}


def _merge(data, tmp_path, *extra: str, tok: str | Path = "plain", sources: list[str] | None = None) -> tuple[int, Path]:
    """Runs merge in-process on one worker; `tok` is a fixture tokenizer's label or a folder."""
    out = tmp_path / "merged" / "train.jsonl"
    tok_path = data["root"] / tok if isinstance(tok, str) else tok
    argv = ["--tokenizer", str(tok_path), "--out", str(out), "--workers", "1", *extra, "--"]
    argv += sources if sources is not None else [str(data["raw"])]
    return merge_main(argv), out


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _stats(out: Path) -> MergeStats:
    return read_stats(out.with_name(f"{out.stem}.stats.json"))


def test_the_stats_name_the_tokenizer_by_its_vocabulary_and_merges(data, tmp_path):
    """What online training compares with the target's tokenizer: not the path, not the size."""
    from pipeline.target.tokenizer import load_identity, tokenizer_identity

    rc, out = _merge(data, tmp_path)
    assert rc == 0
    recorded = _stats(out).tokenizer_identity
    assert recorded == load_identity(data["root"] / "plain") == tokenizer_identity(data["toks"]["marked"])
    vocab = data["toks"]["plain"].get_vocab()
    first, second = sorted(vocab, key=vocab.get)[100:102]
    swapped = json.loads((data["root"] / "plain" / "tokenizer.json").read_text())
    model = swapped["model"]["vocab"]
    model[first], model[second] = model[second], model[first]
    (tmp_path / "swapped").mkdir()
    for f in (data["root"] / "plain").iterdir():
        (tmp_path / "swapped" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "swapped" / "tokenizer.json").write_text(json.dumps(swapped))
    assert load_identity(tmp_path / "swapped") != recorded  # two tokens' ids swapped: another tokenizer


def _masked_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


@pytest.mark.parametrize(("tok", "method"), [("plain", METHOD_PREFIX_DIFF), ("marked", METHOD_MARKERS)])
def test_masked_tokens_decode_to_exactly_the_assistant_turns(data, tmp_path, tok, method):
    rc, out = _merge(data, tmp_path, "--max-len", "4096", tok=tok)
    assert rc == 0
    assert _stats(out).mask_method == method
    tokenizer = data["toks"][tok]
    records = _records(out)
    assert len(records) == sum(data["counts"].values())
    multi_turn = 0
    for rec in records:
        conv = data["by_id"][rec["id"]]["conversations"]
        wanted = [m["content"] + "<|end|>" for m in conv if m["role"] == "assistant"]
        multi_turn += len(wanted) > 1
        assert len(rec["input_ids"]) == len(rec["loss_mask"])
        assert rec["input_ids"] == tokenizer.apply_chat_template(conv)["input_ids"]
        got = [tokenizer.decode(run) for run in _masked_runs(rec["input_ids"], rec["loss_mask"])]
        assert got == wanted, rec["id"]
    assert multi_turn > 0


def test_prefix_diff_agrees_with_generation_markers(data):
    tokenizer = data["toks"]["marked"]
    for rec in data["by_id"].values():
        conv = rec["conversations"]
        assert encode(tokenizer, conv, METHOD_PREFIX_DIFF) == encode(tokenizer, conv, METHOD_MARKERS), rec["id"]


def _template_variant(data, filtered: str):
    template = CHAT_TEMPLATE.replace("{{ message['content'] }}", "{{ message['content'] | " + filtered + " }}")
    texts = [m["content"] for r in data["by_id"].values() for m in r["conversations"]]
    return build_tokenizer(texts, vocab_size=512, chat_template=template)


def test_prefix_diff_masks_only_the_assistant_copy_of_repeated_text(data):
    tok = data["toks"]["plain"]
    conv = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Repeat after me: red blue"},
        {"role": "assistant", "content": "red blue  "},
        {"role": "user", "content": "Again: red blue"},
        {"role": "assistant", "content": "red blue"},
    ]
    enc = encode(tok, conv, METHOD_PREFIX_DIFF)
    assert [tok.decode(r) for r in _masked_runs(enc.input_ids, enc.loss_mask)] == ["red blue  <|end|>", "red blue<|end|>"]


def test_prefix_diff_follows_a_template_that_rewrites_content(data):
    conv = [
        {"role": "user", "content": "Repeat after me: red blue"},
        {"role": "assistant", "content": "  red blue  "},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "red blue"},
    ]
    trimmed = _template_variant(data, "trim")
    enc = encode(trimmed, conv, METHOD_PREFIX_DIFF)
    assert [trimmed.decode(r) for r in _masked_runs(enc.input_ids, enc.loss_mask)] == ["red blue<|end|>", "red blue<|end|>"]

    # content no longer findable: the whole rendered assistant turn is learnt, never nothing
    upper = _template_variant(data, "upper")
    enc = encode(upper, conv, METHOD_PREFIX_DIFF)
    runs = [upper.decode(r) for r in _masked_runs(enc.input_ids, enc.loss_mask)]
    assert runs == ["RED BLUE  <|end|>", "RED BLUE<|end|>"]


def test_long_source_dropped_with_drop(data, tmp_path, capsys):
    rc, out = _merge(data, tmp_path, "--max-len", "512", "--on-long", "drop")
    assert rc == 0
    stats = _stats(out)
    long = stats.sources[LONG_SOURCE]
    assert long.dropped_too_long > long.read / 2
    assert long.records > 0, "the long source shows a drop but must still contribute at --max-len 512"
    assert long.records == long.read - long.dropped_too_long
    assert stats.dropped == sum(s.dropped_too_long + s.dropped_empty_mask for s in stats.sources.values())
    assert stats.truncated == 0
    records = _records(out)
    assert len(records) == stats.records == sum(s.records for s in stats.sources.values())
    assert all(len(r["input_ids"]) <= 512 for r in records)
    assert sum(r["source"] == LONG_SOURCE for r in records) == long.records
    assert f"warning: {LONG_SOURCE}:" in capsys.readouterr().out


def test_long_source_truncated_with_truncate(data, tmp_path):
    rc, out = _merge(data, tmp_path, "--max-len", "512", "--on-long", "truncate")
    assert rc == 0
    stats = _stats(out)
    long = stats.sources[LONG_SOURCE]
    assert long.truncated > long.read / 2 and long.records == long.read
    assert stats.truncated == long.truncated and stats.dropped == 0
    longs = [r for r in _records(out) if r["source"] == LONG_SOURCE]
    assert sum(len(r["input_ids"]) == 512 for r in longs) == long.truncated
    assert all(len(r["input_ids"]) <= 512 and any(r["loss_mask"]) for r in longs)
    assert stats.tokens == sum(len(r["input_ids"]) for r in _records(out))
    assert stats.loss_tokens == sum(sum(r["loss_mask"]) for r in _records(out))


def test_records_without_an_answer_are_skipped_by_reason_and_named(data, tmp_path, capsys):
    src = tmp_path / "odd.jsonl"
    write_jsonl(
        src,
        [
            {"id": "no-answer", "conversations": [{"role": "user", "content": "hello"}]},
            {"id": "blank-answer", "conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]},
            {"id": "good", "conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        ],
    )
    rc, out = _merge(data, tmp_path, "--max-invalid", "1", sources=[str(src)])
    assert rc == 0
    stats = _stats(out)
    assert stats.sources["odd"].input.skipped == {"no_assistant": 1, "empty_value": 1}
    assert stats.records == 1 and stats.skipped == 2 and stats.dropped == 0
    assert [r["id"] for r in _records(out)] == ["good"]
    printed = capsys.readouterr().out
    assert f"skipped: no_assistant (e.g. {src}:1 (id no-answer);" in printed
    assert f"skipped: empty_value (e.g. {src}:2 (id blank-answer);" in printed


def test_include_and_exclude_pick_sources(data, tmp_path, capsys):
    rc, out = _merge(data, tmp_path, "--include", "arithmetic", "units", "--max-len", "4096")
    assert rc == 0
    assert {r["source"] for r in _records(out)} == {"arithmetic", "units"}
    assert set(_stats(out).sources) == {"arithmetic", "units"}

    rc, out = _merge(data, tmp_path, "--exclude", LONG_SOURCE)
    assert rc == 0
    assert set(_stats(out).sources) == set(data["counts"]) - {LONG_SOURCE}

    rc, _ = _merge(data, tmp_path, "--include", "nosuch")
    assert rc == 2
    err = capsys.readouterr().err
    assert "nosuch" in err and "arithmetic" in err


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"id": "x", "conversations": [{"role": "user", "content": "a"}, {"role": "assistant"}]}', "conversations[1].content"),
        ('{"id": "x", "conversations": [{"role": "robot", "content": "a"}]}', "conversations[0].role"),
        ('{"id": ["x"], "conversations": [{"role": "user", "content": "a"}]}', "'id'"),
        ('{"prompt": "a", "response": "b"}', "keys found: 'prompt', 'response'"),
        ('{"id": "x", "conversations": [', "not valid JSON"),
    ],
)
def test_strict_stops_at_a_malformed_record_naming_file_line_and_field(data, tmp_path, capsys, line, field):
    good = '{"id": "g", "conversations": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}'
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{good}\n\n{line}\n{good}\n")
    rc, out = _merge(data, tmp_path, "--strict", sources=[str(bad)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{bad}:3" in err and field in err
    leftovers = list(out.parent.iterdir()) if out.parent.exists() else []
    assert leftovers == [], "partial output or temporary files left behind"


def test_run_as_program_reports_bad_input_without_traceback(data, tmp_path):
    missing = tmp_path / "nope.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.merge", "--tokenizer", str(data["root"] / "plain"), "--out", str(tmp_path / "o.jsonl"), str(missing)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and str(missing) in proc.stderr

    helped = subprocess.run([sys.executable, "-m", "pipeline.merge", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                            check=False)
    assert helped.returncode == 0 and "--on-long" in helped.stdout and "--exclude" in helped.stdout


def test_tokenizer_without_chat_template_is_refused(data, tmp_path, capsys):
    tok = build_tokenizer(["a b c"], vocab_size=280)
    tok.chat_template = None
    tok.save_pretrained(tmp_path / "bare")
    rc, _ = _merge(data, tmp_path, tok=tmp_path / "bare")
    assert rc == 2
    assert "chat_template" in capsys.readouterr().err


def test_output_is_the_same_for_any_worker_count_and_seeded(data, tmp_path):
    outs = {}
    for label, extra in (("w1", ["--workers", "1"]), ("w2", ["--workers", "2"]), ("seed1", ["--seed", "1"])):
        out = tmp_path / label / "train.jsonl"
        argv = ["--tokenizer", str(data["root"] / "plain"), "--out", str(out), *extra, "--", str(data["raw"])]
        assert merge_main(argv) == 0
        outs[label] = out
    one, two, reseeded = (outs[k].read_bytes() for k in ("w1", "w2", "seed1"))
    assert one == two
    assert one != reseeded and sorted(one.splitlines()) == sorted(reseeded.splitlines())
    stats = _stats(outs["w2"])
    assert stats.dataset_sha256 == hashlib.sha256(two).hexdigest()
    ids = [r["id"] for r in _records(outs["w1"])]
    assert ids != sorted(ids), "records are not shuffled"


def test_events_report_progress_and_artifacts(data, tmp_path, monkeypatch):
    events_path = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events_path))
    rc, out = _merge(data, tmp_path, "--stats", str(tmp_path / "s.json"))
    assert rc == 0
    events, _ = read_events(events_path)
    progress = [e for e in events if e.kind == "progress"]
    total = sum(data["counts"].values())
    assert progress and all(e.get("unit") == "samples" and e.get("done") <= e.get("total") for e in progress[1:])
    assert progress[-1].get("done") == progress[-1].get("total") == total
    artifacts = {e.get("path"): e.get("bytes") for e in events if e.kind == "artifact"}
    assert artifacts[str(out)] == out.stat().st_size
    assert str(tmp_path / "s.json") in artifacts
    assert not out.with_name("train.stats.json").exists()
    assert os.path.exists(tmp_path / "s.json")


def test_a_sample_whose_answer_lies_past_max_len_is_dropped_not_written_with_an_empty_mask(data, tmp_path, capsys):
    src = tmp_path / "late.jsonl"
    long_question = "Repeat after me: " + "red blue green " * 200
    write_jsonl(src, [
        {"id": "late", "conversations": [{"role": "user", "content": long_question}, {"role": "assistant", "content": "ok"}]},
        {"id": "good", "conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
    ])
    rc, out = _merge(data, tmp_path, "--max-len", "64", "--on-long", "truncate", sources=[str(src)])
    assert rc == 0
    assert [r["id"] for r in _records(out)] == ["good"]
    assert all(any(r["loss_mask"]) for r in _records(out))
    assert _stats(out).sources["late"].dropped_too_long == 1 and _stats(out).dropped == 1
    assert "no assistant tokens left after truncation" in capsys.readouterr().out
