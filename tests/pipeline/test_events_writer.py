"""$EAGLE3_EVENTS as an operator may set it by hand: a folder that does not exist yet, or a
path that cannot be written. The stage's work never fails because of its progress reports."""

from __future__ import annotations

import errno
import os

from pipeline import events
from pipeline.events import EventWriter, iter_events


def test_events_into_a_missing_folder_create_it(tmp_path):
    path = tmp_path / "not" / "yet" / "events.jsonl"
    with EventWriter(path) as w:
        w.progress(1, 2, unit="steps")
    assert [e.kind for e in iter_events(path)] == ["progress"]


def test_an_unwritable_events_path_warns_once_and_the_stage_goes_on(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    with EventWriter(tmp_path / "afile" / "events.jsonl") as w:
        w.progress(1, 2)
        w.message("still running")
        assert not w.enabled
    err = capsys.readouterr().err
    assert err.count("cannot write events to") == 1 and "continuing without them" in err


def test_a_full_disk_under_the_events_file_does_not_stop_the_stage(tmp_path, monkeypatch, capsys):
    w = EventWriter(tmp_path / "events.jsonl")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(events.os, "write", full)
    w.progress(1, 2)
    w.progress(2, 2)
    monkeypatch.undo()
    assert capsys.readouterr().err.count("No space left on device") == 1
    w.close()


def test_a_stage_run_with_events_in_a_missing_folder_exits_0_and_reports(tmp_path, monkeypatch):
    from pipeline.export import __main__ as export
    from tests.pipeline.test_export import make_checkpoint, make_drafter, make_target

    target = make_target(tmp_path / "target")
    train = make_checkpoint(tmp_path / "train", make_drafter(target))
    path = tmp_path / "runs" / "export" / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(path))
    assert export.main(["--checkpoint", str(train), "--target", str(target), "--out", str(tmp_path / "d")]) == 0
    assert "artifact" in [e.kind for e in iter_events(path)]


def test_a_warning_is_one_line_in_the_log_and_one_event_the_console_counts(tmp_path, monkeypatch, capsys):
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(events.ENV_VAR, str(path))
    monkeypatch.delenv("RANK", raising=False)
    events.warn("train", "--max-len 4096 is above the target's max_position_embeddings 2048")
    assert capsys.readouterr().out == "train: warning: --max-len 4096 is above the target's max_position_embeddings 2048\n"
    said = [(e.get("level"), e.get("text")) for e in iter_events(path) if e.kind == "message"]
    assert said == [("warning", "--max-len 4096 is above the target's max_position_embeddings 2048")]


def test_a_warning_every_torchrun_rank_meets_is_one_event(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(events.ENV_VAR, str(path))
    lines: list[str] = []
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        events.warn("extract", "torch.compile of the decoder layers failed", log=lines.append)
    assert len(lines) == 4  # each rank's log says it
    assert sum(1 for e in iter_events(path) if e.get("level") == "warning") == 1
