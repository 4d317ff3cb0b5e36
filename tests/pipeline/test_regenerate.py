"""`python -m pipeline.regenerate --backend server`, end to end: the real program in a
subprocess against the stand-in SGLang server (tests/pipeline/standin_sglang.py)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stage_call import StageResult, call_stage
from standin_sglang import StandIn, answer

from pipeline.records import regenerate_stats
from pipeline.records.regenerate_estimate import parse_estimate
from pipeline.regenerate.conversation import seed_for

REPO = Path(__file__).resolve().parents[2]
MODEL = "/models/tiny-target"
MAX_NEW = 12


def program_env(**extra: str) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_")}
    e.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **extra)
    return e


def write_source(path: Path, n: int, seed: int = 0) -> Path:
    """ShareGPT-shaped chats: one to three user turns, some with a system prompt, plus the
    dirt regenerate must count: an assistant-first chunk, a `bing` turn, an empty record."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        turns = [{"from": "system", "value": f"system prompt {i}"}] if i % 4 == 0 else []
        for t in range(rng.randint(1, 3)):
            turns += [{"from": "human", "value": f"question {i}.{t} about {rng.random():.6f}"},
                      {"from": "bing" if i == 3 else "gpt", "value": f"old answer {i}.{t}"}]
        lines.append({"id": f"chat-{i}", "conversations": turns})
    lines.insert(5, {"id": "chunk", "conversations": [{"from": "gpt", "value": "a continuation"},
                                                      {"from": "human", "value": "and?"}]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def expected(path: Path, seed: int = 0) -> list[dict]:
    """What the output must hold: every user turn answered by the stand-in, in input order."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        conv = [{"role": {"human": "user", "system": "system"}.get(m["from"], "assistant"), "content": m["value"]}
                for m in rec["conversations"]]
        if not conv or conv[0]["role"] == "assistant":
            continue
        messages: list[dict] = []
        turn = 0
        for m in conv:
            if m["role"] == "assistant":
                continue
            messages.append(m)
            if m["role"] == "user":
                text, _ = answer(messages, seed_for(seed, rec["id"], turn), MAX_NEW)
                messages = [*messages, {"role": "assistant", "content": text}]
                turn += 1
        out.append({"id": rec["id"], "conversations": messages})
    return out


def argv(src: Path, out: Path, *servers: str, more: tuple[str, ...] = ()) -> list[str]:
    flags = [x for url in servers for x in ("--server", url)]
    return [sys.executable, "-m", "pipeline.regenerate", str(src), "--out", str(out), "--backend", "server",
            *flags, "--served-model", MODEL, "--max-new-tokens", str(MAX_NEW), "--temperature", "0.7",
            "--seed", "0", *more]


def run(*args: str | Path, env: dict | None = None, timeout: float | None = None) -> StageResult:
    """argv's program (`python -m pipeline.regenerate ...`) run in this process, with `env`'s
    additions to program_env(); with a `timeout`, started as a program that must end within it (a test
    that the run does not hang)."""
    assert [str(a) for a in args[:3]] == [sys.executable, "-m", "pipeline.regenerate"], args
    if timeout is not None:
        done = subprocess.run([str(a) for a in args], cwd=REPO, env={**program_env(), **(env or {})},
                              capture_output=True, text=True, timeout=timeout)
        return StageResult(done.args, done.returncode, done.stdout, done.stderr)
    return call_stage("regenerate", args[3:], env=env)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def src(tmp_path) -> Path:
    return write_source(tmp_path / "chats.jsonl", 40)


def test_regenerate_answers_every_user_turn_in_order_and_counts_what_it_skipped(tmp_path, src):
    events = tmp_path / "events.jsonl"
    with StandIn(MODEL, None, hidden=8) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url), env={"EAGLE3_EVENTS": str(events)})
    assert p.returncode == 0, p.stderr
    got = lines(tmp_path / "out.jsonl")
    assert got == expected(src)
    assert len(got) == 40 and all(m["role"] != "assistant" or m["content"].startswith("turn")
                                  for r in got for m in r["conversations"])
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.status == "done"
    assert stats.records_in == 41 and stats.records_out == 40
    assert stats.skipped == {"assistant_first": 1}
    assert stats.answers == sum(m["role"] == "assistant" for r in got for m in r["conversations"])
    assert stats.generated_tokens > 0 and stats.failures == {}
    progress = [json.loads(x) for x in events.read_text().splitlines() if '"progress"' in x]
    assert progress[-1]["done"] == progress[-1]["total"] == 40 and progress[-1]["unit"] == "records"
    assert progress[-1]["tokens"] == stats.generated_tokens


def test_a_prompt_the_server_refuses_is_counted_by_reason_and_the_rest_is_written(tmp_path, src):
    text = src.read_text().replace("question 7.0", "TOO-LONG question 7.0")
    src.write_text(text)
    with StandIn(MODEL, None, hidden=8, too_long_marker="TOO-LONG") as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url))
    assert p.returncode == 0, p.stderr
    ids = [r["id"] for r in lines(tmp_path / "out.jsonl")]
    assert "chat-7" not in ids and len(ids) == 39
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.failures == {"prompt_too_long": 1}
    assert stats.failure_examples["prompt_too_long"][0].startswith("chat-7: ")
    assert "failed: 1 prompt_too_long" in p.stdout


def test_a_server_that_dies_mid_run_stops_it_with_exit_4_naming_it_and_the_rerun_completes_once_each(tmp_path, src):
    out = tmp_path / "out.jsonl"
    more = ("--concurrency", "2", "--retries", "1", "--max-consecutive-failures", "3", "--timeout", "10")
    with StandIn(MODEL, None, hidden=8, die_after=25) as dying:
        p = run(*argv(src, out, dying.url, more=more))
        url = dying.url
    assert p.returncode == 4, p.stdout + p.stderr
    assert f"server {url} failed 3 requests in a row" in p.stderr
    assert "rerun the same command to resume" in p.stderr
    partial = lines(out)
    assert 0 < len(partial) < 40
    assert partial == expected(src)[:len(partial)], "a record was written past one the dead server lost"
    assert regenerate_stats.read_stats(tmp_path / "out.stats.json").status == "stopped"
    with StandIn(MODEL, None, hidden=8) as alive:
        p = run(*argv(src, out, alive.url, more=more))
        asked = alive.chat_requests
    assert p.returncode == 0, p.stderr
    got = lines(out)
    assert got == expected(src)
    assert len({r["id"] for r in got}) == len(got) == 40
    assert asked == sum(m["role"] == "assistant" for r in got[len(partial):] for m in r["conversations"])


@pytest.mark.parametrize("failing", [7, 39])  # the last record: nothing answered after it
def test_a_record_the_server_keeps_failing_is_counted_once_it_answers_others_and_the_rest_is_written(
        tmp_path, src, failing):
    text = src.read_text().replace(f"question {failing}.0", f"FAIL question {failing}.0")
    src.write_text(text)
    more = ("--concurrency", "2", "--retries", "1", "--max-consecutive-failures", "3")
    with StandIn(MODEL, None, hidden=8, fail_marker="FAIL") as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url, more=more))
    assert p.returncode == 0, p.stderr
    got = lines(tmp_path / "out.jsonl")
    assert got == [r for r in expected(src) if r["id"] != f"chat-{failing}"]
    stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
    assert stats.failures == {"http_5xx": 1} and stats.records_out == 39
    assert stats.failure_examples["http_5xx"][0].startswith(f"chat-{failing}: ")


def test_a_failed_record_retried_by_a_rerun_takes_its_place_in_input_order(tmp_path, src):
    """The rerun of a finished run asks again only the record that failed; it used to land last,
    against the documented input order (merge and a diff of two runs see the same file)."""
    src.write_text(src.read_text().replace("question 7.0", "FAIL question 7.0"))
    out = tmp_path / "out.jsonl"
    with StandIn(MODEL, None, hidden=8, fail_marker="FAIL") as server:
        first = run(*argv(src, out, server.url, more=("--retries", "0")))
    assert first.returncode == 0, first.stderr
    assert [r["id"] for r in lines(out)] == [r["id"] for r in expected(src) if r["id"] != "chat-7"]
    with StandIn(MODEL, None, hidden=8) as server:
        again = run(*argv(src, out, server.url))
    assert again.returncode == 0, again.stderr
    assert lines(out) == expected(src)
    assert "put the records back in input order" in again.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    with StandIn(MODEL, None, hidden=8) as server:
        third = run(*argv(src, out, server.url))
    assert third.returncode == 0 and lines(out) == expected(src) and "input order" not in third.stdout


def _wait(cond, what: str, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)  # wait-ok: poll interval of a deadline loop


def _count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_at_random_points_then_resume_gives_the_uninterrupted_output(tmp_path):
    src = write_source(tmp_path / "chats.jsonl", 90, seed=2)
    rng = random.Random(13)
    more = ("--concurrency", "3")
    with StandIn(MODEL, None, hidden=8, chat_latency=0.03) as server:
        ref = tmp_path / "ref.jsonl"
        assert run(*argv(src, ref, server.url, more=more)).returncode == 0
        out = tmp_path / "out.jsonl"
        kills = 0
        for _ in range(40):
            # a random point: after some number of answers, wherever the writes are then
            target = server.chat_requests + rng.randint(1, 90)
            proc = subprocess.Popen(argv(src, out, server.url, more=more), cwd=REPO, env=program_env(),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _wait(lambda proc=proc, target=target: proc.poll() is not None or server.chat_requests >= target, f"{target} answers")
            if proc.poll() is not None:
                _, err = proc.communicate()
                assert proc.returncode == 0, err
                break
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            kills += 1
        else:
            pytest.fail("forty runs did not finish the output")
        assert kills >= 3
        assert len({r["id"] for r in lines(out)}) == len(lines(out))
        # A kill inside a write leaves a torn line; the next run cuts it and finishes the same way.
        text = out.read_bytes()
        last = text[:-1].rfind(b"\n") + 1
        out.write_bytes(text[:last] + text[last: last + 17])
        p = run(*argv(src, out, server.url))
    assert p.returncode == 0, p.stderr
    assert "cut a torn last line of 17 bytes" in p.stdout
    assert out.read_bytes() == ref.read_bytes()


def test_a_slow_server_never_has_more_requests_in_flight_than_the_concurrency_bound(tmp_path, src):
    with StandIn(MODEL, None, hidden=8, chat_latency=0.15) as a, StandIn(MODEL, None, hidden=8, chat_latency=0.15) as b:
        p = run(*argv(src, tmp_path / "out.jsonl", a.url, b.url, more=("--concurrency", "3")))
        peaks = (a.chat_max_inflight, b.chat_max_inflight)
        asked = a.chat_requests + b.chat_requests
    assert p.returncode == 0, p.stderr
    assert max(peaks) <= 3 and min(peaks) >= 1, peaks
    assert asked == sum(m["role"] == "assistant" for r in lines(tmp_path / "out.jsonl") for m in r["conversations"])
    assert lines(tmp_path / "out.jsonl") == expected(src)


def test_a_server_serving_another_model_is_refused_before_the_output_is_touched(tmp_path, src):
    with StandIn("/models/other", None, hidden=8) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url))
    assert p.returncode == 2
    assert f"server {server.url} serves '/models/other', not '{MODEL}'" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "out.jsonl").exists()


def test_a_server_named_twice_once_with_a_trailing_slash_is_refused_before_anything_is_asked(tmp_path, src):
    with StandIn(MODEL, None, hidden=8) as server:
        p = run(*argv(src, tmp_path / "out.jsonl", server.url, server.url + "/"))
    assert p.returncode == 2 and p.stderr.strip() == "regenerate: error: --server: the same URL is given twice"
    assert not (tmp_path / "out.jsonl").exists()


def test_a_server_not_running_at_the_start_is_exit_4_with_what_to_do(tmp_path, src):
    with StandIn(MODEL, None, hidden=8) as server:
        url = server.url
    p = run(*argv(src, tmp_path / "out.jsonl", url))
    assert p.returncode == 4
    assert f"server {url} is not answering" in p.stderr and "start it" in p.stderr


def test_a_resume_with_another_seed_is_refused_naming_both(tmp_path, src):
    with StandIn(MODEL, None, hidden=8) as server:
        assert run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--limit", "5"))).returncode == 0
        p = run(*argv(src, tmp_path / "out.jsonl", server.url)[:-2], "--seed", "1")
    assert p.returncode == 2
    assert "seed: 0 then, 1 now" in p.stderr


def test_limit_regenerates_the_first_records_and_a_larger_limit_extends_them(tmp_path, src):
    out = tmp_path / "out.jsonl"
    with StandIn(MODEL, None, hidden=8) as server:
        assert run(*argv(src, out, server.url, more=("--limit", "7"))).returncode == 0
        assert lines(out) == expected(src)[:7]
        assert run(*argv(src, out, server.url, more=("--limit", "12"))).returncode == 0
    assert lines(out) == expected(src)[:12]


def test_estimate_counts_the_same_records_and_bounds_what_the_run_writes(tmp_path, src):
    p = run(sys.executable, "-m", "pipeline.regenerate", "--estimate", src, "--limit", "30", "--max-new-tokens",
            str(MAX_NEW), "--json")
    assert p.returncode == 0, p.stderr
    est = parse_estimate(p.stdout, "pipeline.regenerate --estimate --json")
    with StandIn(MODEL, None, hidden=8) as server:
        assert run(*argv(src, tmp_path / "out.jsonl", server.url, more=("--limit", "30"))).returncode == 0
    got = lines(tmp_path / "out.jsonl")
    assert est.records == len(got) == 30
    assert est.answers == sum(m["role"] == "assistant" for r in got for m in r["conversations"])
    assert (tmp_path / "out.jsonl").stat().st_size <= est.bytes


def test_an_output_folder_that_does_not_exist_yet_is_created(tmp_path, src):
    out = tmp_path / "new" / "folder" / "out.jsonl"
    with StandIn(MODEL, None, hidden=8) as server:
        p = run(*argv(src, out, server.url, more=("--limit", "3")))
    assert p.returncode == 0, p.stderr
    assert len(lines(out)) == 3 and (out.parent / "out.stats.json").is_file()


def test_sigterm_stops_with_143_keeping_every_finished_record_and_the_rerun_completes(tmp_path, src):
    out = tmp_path / "out.jsonl"
    with StandIn(MODEL, None, hidden=8, chat_latency=0.05) as server:
        proc = subprocess.Popen(argv(src, out, server.url, more=("--concurrency", "2")), cwd=REPO, env=program_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait(lambda: proc.poll() is not None or _count(out) >= 3, "3 records")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "stopped by SIGTERM" in err and "Traceback" not in err
        stats = regenerate_stats.read_stats(tmp_path / "out.stats.json")
        assert stats.status == "stopped" and stats.records_out == _count(out) >= 3
        assert run(*argv(src, out, server.url)).returncode == 0
    assert lines(out) == expected(src)


def test_a_stop_that_lands_between_the_write_and_the_fsync_never_writes_a_record_twice(tmp_path, monkeypatch):
    """SIGTERM raises wherever the main thread is; the stage's `finally` flushes again. A flush
    interrupted after its write used to write the same records a second time."""
    from pipeline.regenerate import output
    from pipeline.regenerate.errors import Terminated

    path = tmp_path / "out.jsonl"
    out = output.Appender(path)
    for i in range(3):
        out.add({"id": f"r{i}"})
    real = output.os.fsync
    calls = []

    def interrupted(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise Terminated("stopped by SIGTERM")
        return real(fd)

    monkeypatch.setattr(output.os, "fsync", interrupted)
    with pytest.raises(Terminated):
        out.flush()
    out.add({"id": "r3"})
    assert out.flush() == 4
    out.close()
    assert [json.loads(x)["id"] for x in path.read_text().split("\n") if x] == ["r0", "r1", "r2", "r3"]
    assert out.records == 4
