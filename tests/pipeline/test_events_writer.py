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
