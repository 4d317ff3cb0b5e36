"""Hostile source records and output paths for regenerate and merge (issue 25): text no file
can hold (a lone surrogate) is skipped and counted, an --out swapped for a symlink while the
run waits is never followed, and a --stats that names somebody else's file is refused."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from standin_sglang import StandIn
from test_regenerate import MODEL, argv, lines, run, write_source

from pipeline.chat.template import CHAT_TEMPLATE
from pipeline.demo.tokenizer import build_tokenizer
from pipeline.merge.__main__ import main as merge_main
from pipeline.records import merge_stats, regenerate_stats

SURROGATE_TEXT = '{"id": "bad-text", "conversations": [{"from": "human", "value": "hi \\ud800 there"}, ' \
                 '{"from": "gpt", "value": "old"}]}\n'
SURROGATE_ID = '{"id": "bad-\\udfff-id", "conversations": [{"from": "human", "value": "hello"}, ' \
               '{"from": "gpt", "value": "old"}]}\n'


def _good(i: int) -> dict:
    return {"id": f"g{i}", "conversations": [{"from": "human", "value": f"What is {i} plus {i}?"},
                                             {"from": "gpt", "value": f"{i} plus {i} is {2 * i}."}]}


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tok")
    texts = [m["value"] for i in range(60) for m in _good(i)["conversations"]]
    build_tokenizer(texts, vocab_size=300, chat_template=CHAT_TEMPLATE).save_pretrained(root)
    return root


def _with_surrogates(path: Path, good: int) -> Path:
    path.write_text("".join(json.dumps(_good(i)) + "\n" for i in range(good)) + SURROGATE_TEXT + SURROGATE_ID)
    return path


def test_regenerate_skips_and_counts_a_source_record_whose_text_or_id_is_a_lone_surrogate(tmp_path):
    src = _with_surrogates(tmp_path / "chats.jsonl", 58)
    with StandIn(MODEL, None, hidden=8) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert [r["id"] for r in lines(tmp_path / "out.jsonl")] == [f"g{i}" for i in range(58)]
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.skipped == {"not_utf8": 2} and stats.status == "done"


def test_merge_skips_and_counts_a_lone_surrogate_under_max_invalid(tok, tmp_path, capsys):
    src = _with_surrogates(tmp_path / "chats.jsonl", 58)
    out = tmp_path / "out" / "train.jsonl"
    rc = merge_main(["--tokenizer", str(tok), "--out", str(out), "--workers", "1", str(src)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert len(out.read_text().splitlines()) == 58
    stats = merge_stats.read_stats(out.with_name("train.stats.json"))
    assert stats.sources["chats"].input.skipped == {"not_utf8": 2}


def test_an_out_swapped_for_a_symlink_to_the_source_while_waiting_for_the_server_leaves_the_source_whole(tmp_path):
    src = write_source(tmp_path / "chats.jsonl", 10)
    src.write_bytes(src.read_bytes().rstrip(b"\n"))  # a source whose last line has no newline
    before = src.read_bytes()
    out = tmp_path / "out.jsonl"
    asked, swapped = threading.Event(), threading.Event()
    with StandIn(MODEL, None, hidden=8) as server:
        assert run(*argv(src, out, server.url, more=("--limit", "4"))).returncode == 0
        real_get = server.httpd.RequestHandlerClass.do_GET

        def held_health(handler):
            if handler.path == "/health":
                asked.set()
                swapped.wait(60)
            real_get(handler)

        server.httpd.RequestHandlerClass.do_GET = held_health
        result: list = []
        t = threading.Thread(target=lambda: result.append(run(*argv(src, out, server.url))), daemon=True)
        t.start()
        assert asked.wait(60), "regenerate never asked /health"
        out.rename(tmp_path / "moved.jsonl")
        out.symlink_to(src)
        swapped.set()
        t.join(120)
    assert src.read_bytes() == before, "the source was cut through the swapped --out"
    p = result[0]
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"--out {out}" in p.stderr and "Traceback" not in p.stderr


def test_regenerate_refuses_a_stats_path_that_holds_somebody_elses_file_and_rewrites_its_own(tmp_path):
    src = write_source(tmp_path / "chats.jsonl", 4)
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": "keep me"}\n')
    with StandIn(MODEL, None, hidden=8) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--stats", str(notes))))
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"--stats {notes}" in p.stderr and "Traceback" not in p.stderr
        assert notes.read_text() == '{"mine": "keep me"}\n' and not (tmp_path / "out.jsonl").exists()
        own = tmp_path / "own.stats.json"
        assert run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--stats", str(own), "--limit", "2"))).returncode == 0
        again = run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--stats", str(own))))
    assert again.returncode == 0, again.stderr
    assert json.loads(own.read_text())["records_out"] == 4


def test_merge_refuses_a_stats_path_that_holds_somebody_elses_file(tok, tmp_path, capsys):
    src = tmp_path / "chats.jsonl"
    src.write_text("".join(json.dumps(_good(i)) + "\n" for i in range(10)))
    notes = tmp_path / "notes.json"
    notes.write_text("my notes\n")
    out = tmp_path / "out" / "train.jsonl"
    rc = merge_main(["--tokenizer", str(tok), "--out", str(out), "--stats", str(notes), "--workers", "1", str(src)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--stats {notes}" in err and notes.read_text() == "my notes\n" and not out.exists()
    own = tmp_path / "own.json"
    for _ in range(2):  # a rerun rewrites its own stats
        assert merge_main(["--tokenizer", str(tok), "--out", str(out), "--stats", str(own), "--workers", "1",
                           str(src)]) == 0
    assert json.loads(own.read_text())["records"] == 10


def test_an_appender_refuses_a_record_line_its_own_resume_could_not_read(tmp_path):
    from pipeline.regenerate import output

    path = tmp_path / "out.jsonl"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    out = output.Appender(path, fd)
    with pytest.raises(output.TooLarge):
        out.add({"id": "huge", "conversations": [{"role": "user", "content": "x" * (output.MAX_LINE + 1)}]})
    out.add({"id": "small", "conversations": []})
    out.flush()
    out.close()
    with open(path, "rb") as f:
        assert output.done_ids(f.fileno(), path)[0] == {"small"}


def test_an_atomic_write_never_truncates_what_a_link_planted_at_its_temp_name_points_to(tmp_path):
    from pipeline.atomic_io import write_bytes_atomic

    victim = tmp_path / "source.jsonl"
    victim.write_text('{"id": "keep"}\n')
    (tmp_path / ".stats.json.tmp").symlink_to(victim)
    write_bytes_atomic(tmp_path / "stats.json", b"{}\n")
    assert victim.read_text() == '{"id": "keep"}\n'
    assert (tmp_path / "stats.json").read_bytes() == b"{}\n" and not (tmp_path / "stats.json").is_symlink()
