"""A full disk anywhere in an extraction (a sample file, a manifest append, closing the
manifest, the final manifest, meta.json) stops it with the reserve exit code 3 and says how
to resume: never exit 1 with a bare OSError. The failure is injected in-process."""

from __future__ import annotations

import errno
import os
import signal

import pytest


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def extract_main(monkeypatch, xt):
    """Runs `python -m pipeline.extract` in this process; returns (exit code, stderr)."""
    import torch

    from pipeline.extract.__main__ import main

    for k in [k for k in os.environ if k.startswith("EAGLE3_")]:
        monkeypatch.delenv(k)
    sigterm, threads = signal.getsignal(signal.SIGTERM), torch.get_num_threads()
    torch.set_num_threads(1)

    def run(capfd, model, data, out, *more):
        argv = xt.extract_argv(model, data, out, *more)[3:]  # drop python -m pipeline.extract
        code = main(argv)
        return code, capfd.readouterr().err

    yield run
    signal.signal(signal.SIGTERM, sigterm)
    torch.set_num_threads(threads)


def _assert_stopped_for_space(code, err):
    assert code == 3, err
    assert "disk is full" in err and "rerun the same command to resume" in err
    assert "Traceback" not in err and "OSError" not in err


def test_full_disk_while_writing_a_sample_exits_3_and_the_rerun_completes(
        monkeypatch, capfd, tmp_path, tiny_target, tiny_data, reference_store, run_extract, extract_main):
    from pipeline.store import sample_file

    out = tmp_path / "store"
    monkeypatch.setattr(sample_file, "write_all", _enospc)
    code, err = extract_main(capfd, tiny_target, tiny_data.path, out)
    _assert_stopped_for_space(code, err)
    assert "writing sample" in err
    monkeypatch.undo()

    proc = run_extract(tiny_target, tiny_data.path, out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "manifest.jsonl").read_bytes() == (reference_store / "manifest.jsonl").read_bytes()


def test_full_disk_while_appending_to_the_manifest_exits_3(monkeypatch, capfd, tmp_path, tiny_target, tiny_data,
                                                          extract_main):
    from pipeline.store.manifest import ManifestWriter

    monkeypatch.setattr(ManifestWriter, "add", _enospc)
    code, err = extract_main(capfd, tiny_target, tiny_data.path, tmp_path / "store")
    _assert_stopped_for_space(code, err)


def test_full_disk_while_closing_the_manifest_exits_3(monkeypatch, capfd, tmp_path, tiny_target, tiny_data,
                                                     extract_main):
    from pipeline.store.manifest import ManifestWriter

    monkeypatch.setattr(ManifestWriter, "close", _enospc)
    code, err = extract_main(capfd, tiny_target, tiny_data.path, tmp_path / "store", "--limit", "3")
    _assert_stopped_for_space(code, err)
    assert "appending to the manifest" in err


def test_full_disk_while_writing_the_final_manifest_exits_3(monkeypatch, capfd, tmp_path, tiny_target, tiny_data,
                                                           extract_main):
    from pipeline.store import manifest

    monkeypatch.setattr(manifest, "write_bytes_atomic", _enospc)
    code, err = extract_main(capfd, tiny_target, tiny_data.path, tmp_path / "store", "--limit", "3")
    _assert_stopped_for_space(code, err)
    assert "final manifest" in err


def test_full_disk_while_writing_meta_exits_3(monkeypatch, capfd, tmp_path, tiny_target, tiny_data, extract_main):
    from pipeline.store import meta

    monkeypatch.setattr(meta, "write_json_atomic", _enospc)
    code, err = extract_main(capfd, tiny_target, tiny_data.path, tmp_path / "store")
    _assert_stopped_for_space(code, err)
