"""`python -m pipeline.regenerate --backend server` against hostile servers (issue 25): servers
that refuse in every way but a clean error, drip their answers, lie about usage, the model or
the body's length, or answer with text no file can hold. Each server is the stand-in
(tests/pipeline/standin_sglang.py) on 127.0.0.1 with a `reply` that misbehaves; every
loop a hostile reply runs is bounded."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from standin_sglang import StandIn, answer
from test_regenerate import MODEL, argv, expected, lines, run, write_source

from pipeline.records import regenerate_stats

DRIP_S = 0.05  # one byte every DRIP_S seconds; --timeout 1 must end each request long before the drip does
DRIP_BYTES = 1200


def _raw(handler, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}.items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(body)


def _completion(req: dict, **change) -> dict:
    text, tokens = answer(req["messages"], req.get("seed"), int(req.get("max_tokens") or 16))
    body = {"id": "chatcmpl-hostile", "object": "chat.completion", "model": req["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}}
    body.update(change)
    return body


REFUSALS = {
    "200-error": lambda h, req: _raw(h, 200, b'{"error": {"message": "model overloaded", "code": 503}}'),
    "bad-json": lambda h, req: _raw(h, 200, b'{"choices": [{"message": '),
    "wrong-shape": lambda h, req: _raw(h, 200, json.dumps({"choices": [{"text": "hi"}]}).encode()),
    "404": lambda h, req: _raw(h, 404, b'{"detail": "Not Found"}'),
    "redirect": lambda h, req: _raw(h, 302, b"", {"Location": "http://127.0.0.1:9/v1/chat/completions"}),
}


def _refusing(kind: str):
    def reply(handler, req) -> bool:
        REFUSALS[kind](handler, req)
        return True
    return reply


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_a_server_that_refuses_every_request_is_exit_4_naming_it_and_never_done(tmp_path, kind):
    src = write_source(tmp_path / "chats.jsonl", 6)
    out = tmp_path / "out.jsonl"
    more = ("--retries", "0", "--max-consecutive-failures", "3", "--concurrency", "1")
    with StandIn(MODEL, None, hidden=8, reply=_refusing(kind)) as server:
        p = run(*argv(src, out, server.url, more=more))
    assert p.returncode == 4, p.stdout + p.stderr
    assert f"server {server.url} failed 3 requests in a row" in p.stderr and "Traceback" not in p.stderr
    assert regenerate_stats.read_stats(tmp_path / "out.stats.json").status != "done"
    assert not out.exists() or lines(out) == []


def test_a_run_that_wrote_nothing_is_exit_4_and_the_production_verify_does_not_pass_it(tmp_path):
    """Consecutive failures are set out of reach: the share of failed records must stop it."""
    from console.core.lifecycle.project import Project

    data = tmp_path / "data"
    regen = data / "synth_100k" / "regenerated"
    regen.mkdir(parents=True)
    src = write_source(tmp_path / "chats.jsonl", 6)
    out, stats = regen / "B_kimik25.jsonl", regen / "B_kimik25.stats.json"
    more = ("--retries", "0", "--max-consecutive-failures", "1000", "--stats", str(stats))
    with StandIn(MODEL, None, hidden=8, reply=_refusing("200-error")) as server:
        p = run(*argv(src, out, server.url, more=more))
    assert p.returncode == 4, p.stdout + p.stderr
    assert "wrote no record" in p.stderr and "Traceback" not in p.stderr
    assert regenerate_stats.read_stats(stats).status == "failed"
    config = Path(__file__).resolve().parents[2] / "configs" / "kimi-k25-8gpu.yaml"
    results = Project.load(config, {"data": str(data)}).verify("regenerate")
    assert any(r.status == "fail" for r in results), [(r.name, r.status, r.message) for r in results]


def test_a_share_of_failed_records_past_max_failed_share_is_exit_4_and_below_it_done(tmp_path):
    src = write_source(tmp_path / "chats.jsonl", 40)

    def every_fifth(handler, req) -> bool:
        first = next(m["content"] for m in req["messages"] if m["role"] == "user")
        if int(first.split()[1].split(".")[0]) % 5:
            return False
        _raw(handler, 200, b"not json at all")
        return True

    more = ("--retries", "0", "--max-consecutive-failures", "1000", "--concurrency", "2")
    with StandIn(MODEL, None, hidden=8, reply=every_fifth) as server:
        p = run(*argv(src, tmp_path / "a.jsonl", server.url, more=more))
        q = run(*argv(src, tmp_path / "b.jsonl", server.url, more=(*more, "--max-failed-share", "0.25")))
    assert p.returncode == 4, p.stdout + p.stderr
    assert "8 of 40 records failed (20.0%), more than --max-failed-share 0.05" in p.stderr
    stats = regenerate_stats.read_stats(tmp_path / "a.stats.json")
    assert stats.status == "failed" and stats.failures == {"bad_response": 8}
    want = [r for r in expected(src) if int(r["id"].split("-")[1]) % 5]
    assert lines(tmp_path / "a.jsonl") == want
    assert q.returncode == 0, q.stderr
    assert regenerate_stats.read_stats(tmp_path / "b.stats.json").status == "done"
    assert lines(tmp_path / "b.jsonl") == want


def _drip(where: str):
    """Headers, a body or chunks, one byte every DRIP_S, for at most DRIP_BYTES bytes."""
    def reply(handler, req) -> bool:
        body = json.dumps(_completion(req)).encode() + b" " * DRIP_BYTES
        if where == "headers":
            data = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * DRIP_BYTES + b"\r\n"
        elif where == "body":
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            data = body
        else:
            handler.send_response(200)
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            data = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body)))
        handler.close_connection = True
        try:
            for i in range(min(len(data), DRIP_BYTES)):
                handler.wfile.write(data[i:i + 1])
                handler.wfile.flush()
                time.sleep(DRIP_S)  # wait-ok: the drip itself, bounded by DRIP_BYTES
        except OSError:
            pass  # the client gave up: what the test wants
        return True
    return reply


@pytest.mark.parametrize("where", ["headers", "body", "chunks"])
def test_a_server_that_drips_its_answer_fails_each_request_at_the_timeout_and_is_dead(tmp_path, where):
    src = write_source(tmp_path / "chats.jsonl", 3)
    more = ("--retries", "0", "--max-consecutive-failures", "2", "--timeout", "1", "--concurrency", "1")
    with StandIn(MODEL, None, hidden=8, reply=_drip(where)) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url, more=more), timeout=DRIP_S * DRIP_BYTES * 2)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "no complete answer within 1 s (--timeout)" in p.stderr


def test_evaluate_server_mode_ends_a_dripped_answer_at_its_timeout(tmp_path):
    from pipeline.evaluate.errors import BadInput, EvalError
    from pipeline.evaluate.prompts import Prompt
    from pipeline.evaluate.server import query

    def generate(handler, req) -> bool:
        return _drip("body")(handler, {"messages": [{"role": "user", "content": "x"}], "model": MODEL})

    with StandIn(MODEL, None, hidden=8) as server:
        server.reply = generate
        done: list[BaseException] = []
        worker = threading.Thread(target=lambda: _catch(done, query, server.url, [Prompt("p0", [1, 2, 3])], 4,
                                                        1.0, 1), daemon=True)
        worker.start()
        worker.join(DRIP_S * DRIP_BYTES * 2)
    assert done, "evaluate --server was still reading a dripped answer"
    assert isinstance(done[0], (BadInput, EvalError)) and "within 1 s" in str(done[0]), done[0]


def _catch(done: list, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - the test reads what was raised
        done.append(e)
    else:
        done.append(AssertionError("a dripped answer was accepted"))


BAD_ANSWERS = {
    "usage-not-an-object": ("bad_response", lambda req: json.dumps(_completion(req, usage=5)).encode()),
    "tokens-overflow": ("bad_response", lambda req: json.dumps(_completion(req)).encode().replace(
        b'"completion_tokens": ', b'"completion_tokens": 1e400, "x": ')),
    "lone-surrogate": ("bad_text", lambda req: json.dumps(_completion(req)).encode().replace(
        b'"content": "', b'"content": "\\ud800 ')),
    "another-model": ("wrong_model", lambda req: json.dumps(_completion(req, model="/models/other")).encode()),
    "too-long-for-max-new-tokens": ("answer_too_long", lambda req: json.dumps(_completion(req)).encode().replace(
        b'"content": "', b'"content": "' + b"word " * 200_000)),
}


@pytest.mark.parametrize("kind", sorted(BAD_ANSWERS))
def test_one_bad_answer_is_skipped_and_counted_by_reason_and_the_rest_is_written(tmp_path, kind):
    reason, body = BAD_ANSWERS[kind]
    src = write_source(tmp_path / "chats.jsonl", 40)
    src.write_text(src.read_text().replace("question 7.0", "BAD question 7.0"))

    def reply(handler, req) -> bool:
        if not any("BAD" in m["content"] for m in req["messages"]):
            return False
        _raw(handler, 200, body(req))
        return True

    with StandIn(MODEL, None, hidden=8, reply=reply) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--concurrency", "2")))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert lines(tmp_path / "out.jsonl") == [r for r in expected(src) if r["id"] != "chat-7"]
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.status == "done" and stats.failures == {reason: 1}
    assert stats.failure_examples[reason][0].startswith("chat-7: ")
    # what was written reads back: a rerun resumes it and asks nothing but the failed record again
    with StandIn(MODEL, None, hidden=8) as server:
        again = run(*argv(src, tmp_path / "out.jsonl", server.url))
    assert again.returncode == 0, again.stderr
    assert {r["id"] for r in lines(tmp_path / "out.jsonl")} == {r["id"] for r in expected(src)}


def test_a_body_cut_short_is_retried_like_a_dropped_connection(tmp_path):
    src = write_source(tmp_path / "chats.jsonl", 6)
    cut: set[str] = set()

    def reply(handler, req) -> bool:
        key = json.dumps(req["messages"])
        if key in cut:
            return False
        cut.add(key)
        body = json.dumps(_completion(req)).encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:len(body) // 2])  # then the connection ends
        handler.close_connection = True
        return True

    with StandIn(MODEL, None, hidden=8, reply=reply) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--retries", "2")))
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(tmp_path / "out.jsonl") == expected(src)
    assert regenerate_stats.read_stats(tmp_path / "out.stats.json").failures == {}
