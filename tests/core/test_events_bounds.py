"""A phase's events file cannot freeze or bloat the console: a hostile line is skipped,
a line longer than the limit is skipped once (even while still being written), and each
poll parses a bounded number of bytes."""

from __future__ import annotations

import json
import os
import tracemalloc

from console.core.lifecycle.livestats import EventTail
from pipeline.events import MAX_LINE, EventWriter, iter_events, parse_line, read_events


def progress(done: int, t: float = 1000.0) -> bytes:
    return (json.dumps({"t": t + done, "kind": "progress", "done": done, "total": 100, "unit": "samples"})
            + "\n").encode()


def append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def poll_until(tail: EventTail, done: int, polls: int = 50) -> None:
    for _ in range(polls):
        tail.poll()
        if tail.stats.done == done:
            return
    raise AssertionError(f"stats stuck at {tail.stats.done}, expected {done}")


def test_parse_line_never_raises_on_hostile_lines():
    assert parse_line("[" * 200_000) is None
    assert parse_line("[" * (MAX_LINE - 10)) is None  # deep nesting under the length limit
    assert parse_line(b"\xff\xfe{") is None
    assert parse_line('{"kind": "progress", "t": 1e999999}') is not None
    parse_line('{"kind": "progress", "t": ' + "9" * 5000 + "}")  # past int-digit limit: no raise


def test_stats_keep_updating_after_a_bracket_bomb(tmp_path):
    path = tmp_path / "events.jsonl"
    append(path, progress(1))
    tail = EventTail(path)
    poll_until(tail, 1)
    append(path, b"[" * 200_000 + b"\n" + progress(2))
    poll_until(tail, 2)
    append(path, progress(3))
    poll_until(tail, 3)


def test_a_huge_line_without_newline_is_skipped_once_and_memory_stays_bounded(tmp_path):
    path = tmp_path / "events.jsonl"
    append(path, progress(1))
    tail = EventTail(path)
    poll_until(tail, 1)
    size = 400 * 2**20
    with open(path, "r+b") as f:  # 400 MB of NUL bytes, no newline (sparse: costs no disk)
        f.truncate(os.path.getsize(path) + size)
    tracemalloc.start()
    try:
        for _ in range(20):
            tail.poll()
            if tail.offset == os.path.getsize(path):
                break
        assert tail.offset == os.path.getsize(path), "the over-long partial line was not skipped"
        # Polls with nothing new read nothing more; the phase then writes a newline and goes on.
        before = tail.offset
        tail.poll()
        assert tail.offset == before
        append(path, b"\n" + progress(2))
        poll_until(tail, 2)
        append(path, progress(3))
        poll_until(tail, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB while skipping 400 MB"


def test_each_read_parses_a_bounded_number_of_bytes_and_resumes(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as w:
        for i in range(3000):
            w.progress(i, 3000)
    total = os.path.getsize(path)
    events, offset = read_events(path, 0, max_bytes=100_000)
    assert 0 < offset <= 100_000 and offset < total
    assert events[-1].get("done") == len(events) - 1
    assert [e.get("done") for e in iter_events(path)] == list(range(3000))


def test_a_line_longer_than_the_limit_is_skipped_among_good_ones(tmp_path):
    path = tmp_path / "events.jsonl"
    big = json.dumps({"kind": "message", "text": "x" * (2 * MAX_LINE)}).encode() + b"\n"
    append(path, progress(1) + big + progress(2))
    assert [e.get("done") for e in iter_events(path)] == [1, 2]


def test_an_oversized_event_becomes_a_warning_instead_of_vanishing(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as w:
        w.message("x" * (2 * MAX_LINE))
        w.progress(1, 2)
    events = list(iter_events(path))
    assert [e.kind for e in events] == ["message", "progress"]
    assert "dropped" in events[0].get("text") and events[0].get("level") == "warning"
