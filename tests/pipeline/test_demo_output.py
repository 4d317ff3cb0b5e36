"""pipeline.demo --out as an operator can mistype it, and on a full disk: nothing of theirs is touched."""

from __future__ import annotations

import errno
import os

from pipeline import output_guard
from pipeline.demo.__main__ import main as demo_main


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_demo_out_naming_a_folder_it_did_not_write_is_refused_untouched(tmp_path, capsys):
    models = tmp_path / "models"
    (models / "target").mkdir(parents=True)
    (models / "target" / "model.safetensors").write_bytes(b"weights")
    assert demo_main(["--out", str(models), "--quick"]) == 2
    err = capsys.readouterr().err
    assert "has no .eagle3-writer marker of pipeline.demo" in err and len(err.strip().splitlines()) == 1
    assert _tree(models) == {"target/model.safetensors": b"weights"}


def test_a_demo_folder_of_an_earlier_version_is_still_the_demo_s_but_one_holding_more_is_not(tmp_path):
    from pipeline.demo.folder import WRITER, adopt_legacy

    old = tmp_path / "old"
    (old / "raw").mkdir(parents=True)
    (old / "assets.json").write_text("{}")
    adopt_legacy(old)
    assert output_guard.writer_of(old) == WRITER
    mixed = tmp_path / "mixed"
    (mixed / "raw").mkdir(parents=True)
    (mixed / "assets.json").write_text("{}")
    (mixed / "my-notes.txt").write_text("mine")
    adopt_legacy(mixed)
    assert output_guard.writer_of(mixed) is None


def test_a_full_disk_while_building_the_demo_exits_3_and_leaves_no_temporary(tmp_path, monkeypatch, capsys):
    from pipeline.demo import build

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(build, "write_jsonl", full)
    out = tmp_path / "assets"
    assert demo_main(["--out", str(out), "--quick"]) == 3
    err = capsys.readouterr().err
    assert f"the disk is full on {output_guard.volume_of(out)} while writing the demo's chat datasets" in err
    assert sorted(os.listdir(out)) == [output_guard.MARKER]  # its own folder, nothing half-written in it
