from __future__ import annotations

import getpass
import json
import multiprocessing
import socket

from console.core.records.journal import Journal


def test_append_is_on_disk_and_readable_at_once(tmp_path):
    j = Journal(tmp_path / "state")
    rec = j.append("override", phase="extract", check="free-space", reason="disk is being cleaned")

    assert rec["event"] == "override"
    assert rec["user"] == getpass.getuser()
    assert rec["host"] == socket.gethostname()
    assert isinstance(rec["t"], float)
    # Another reader (a second console, the CLI) sees the full record without any close/flush by us.
    lines = (tmp_path / "state" / "journal.jsonl").read_text().splitlines()
    assert json.loads(lines[-1]) == rec
    assert Journal(tmp_path / "state").read() == [rec]


def test_caller_may_name_the_user_but_not_the_time(tmp_path):
    j = Journal(tmp_path)
    rec = j.append("override", phase="train", check="gpus-idle", reason="shared box", user="alice", t=1.0)
    assert rec["user"] == "alice"
    assert rec["t"] > 1.0


def test_read_filters_by_phase_event_and_limit(tmp_path):
    j = Journal(tmp_path)
    j.append("run_started", phase="merge", run_id="r1")
    j.append("run_ended", phase="merge", run_id="r1", code=0)
    j.append("run_started", phase="train", run_id="r2")
    j.append("stop", phase="train", run_id="r2")
    j.append("confirm", phase="cleanup")

    assert [r["run_id"] for r in j.read(phase="merge")] == ["r1", "r1"]
    assert [r["event"] for r in j.read(events={"run_started"})] == ["run_started", "run_started"]
    assert [r["event"] for r in j.read(limit=2)] == ["stop", "confirm"]
    assert [r["event"] for r in j.read(phase="train", events={"stop", "run_ended"})] == ["stop"]
    assert j.read(limit=0) == []


def test_missing_journal_reads_empty(tmp_path):
    assert Journal(tmp_path / "nothing-here").read() == []


def test_torn_last_line_is_skipped_and_the_next_record_stays_whole(tmp_path):
    j = Journal(tmp_path)
    j.append("run_started", phase="merge", run_id="r1")
    with open(j.path, "ab") as f:  # a writer killed mid-record
        f.write(b'{"t": 1.5, "event": "run_en')

    assert [r["event"] for r in j.read()] == ["run_started"]

    j.append("run_ended", phase="merge", run_id="r1", code=0)
    recs = j.read()
    assert [r["event"] for r in recs] == ["run_started", "run_ended"]
    assert recs[-1]["code"] == 0


def test_non_ascii_and_paths_are_recorded(tmp_path):
    j = Journal(tmp_path)
    j.append("override", phase="merge", reason="données déjà nettoyées", path=tmp_path / "x")
    rec = j.read()[0]
    assert rec["reason"] == "données déjà nettoyées"
    assert rec["path"] == str(tmp_path / "x")


def _writer(state_dir: str, tag: str, n: int) -> None:
    j = Journal(state_dir)
    for i in range(n):
        j.append("checks", phase=tag, i=i, pad="x" * 3000)


def test_concurrent_writers_never_interleave(tmp_path):
    ctx = multiprocessing.get_context("fork")
    ps = [ctx.Process(target=_writer, args=(str(tmp_path), f"w{k}", 40)) for k in range(3)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(30)
        assert p.exitcode == 0
    recs = Journal(tmp_path).read()
    assert len(recs) == 120
    for k in range(3):
        assert [r["i"] for r in recs if r["phase"] == f"w{k}"] == list(range(40))
    raw = (tmp_path / "journal.jsonl").read_bytes()
    assert len([line for line in raw.split(b"\n") if line.strip()]) == 120  # no torn or merged lines
