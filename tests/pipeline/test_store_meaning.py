"""A store is checked for what it means, not only for its bytes: each sample below is changed
and its manifest line resealed (size and checksum recomputed), so the checksums match. Both
`extract --verify` and the trainer's read of the sample must refuse it, naming the sample and
the key, where before the verify said "intact" and training ran on states that mean nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import store_tamper

from pipeline.store.integrity import verify_store


def _zero_scales(h, t):
    t["hidden_state_scale"][:] = 0


def _negated_scales(h, t):
    t["aux_hidden_state_scale"][:] *= -1


def _no_store_dtype(h, t):
    del h["__metadata__"]["store_dtype"]


def _nan_codes(h, t):
    t["hidden_state"][2, :5] = store_tamper.E4M3_NAN


def _huge_scales(h, t):
    t["aux_hidden_state_scale"][:] = np.float32(1e38)


def _masked_row(t) -> int:
    return int(np.argwhere(t["loss_mask"] == 0)[0][0])


def _nan_scale_where_masked(h, t):
    t["hidden_state_scale"][_masked_row(t)] = np.float32("nan")


def _inf_scale_where_masked(h, t):
    t["aux_hidden_state_scale"][_masked_row(t), 1] = np.float32("inf")


TAMPERING = {  # what was done -> (edit, the key the refusal names)
    "scales all 0": (_zero_scales, "hidden_state_scale"),
    "scales negated": (_negated_scales, "aux_hidden_state_scale"),
    "store_dtype removed": (_no_store_dtype, "__metadata__"),
    "NaN code values": (_nan_codes, "hidden_state"),
    "scales of 1e38": (_huge_scales, "aux_hidden_state_scale"),
    "a NaN scale at a masked position": (_nan_scale_where_masked, "hidden_state_scale"),
    "an inf scale at a masked position": (_inf_scale_where_masked, "aux_hidden_state_scale"),
}
POSITION = 6  # the manifest line of the sample changed (sample 6: 1 in 5 has a masked row early)


def _tampered(fp8_store: Path, tmp_path: Path, what: str) -> tuple[Path, Path]:
    store = tmp_path / "store"
    shutil.copytree(fp8_store, store)
    edit, _key = TAMPERING[what]
    path = store_tamper.tamper(store, POSITION, edit)
    return store, path


@pytest.mark.parametrize("what", sorted(TAMPERING))
def test_extract_verify_refuses_a_resealed_sample_that_means_nothing(fp8_store, tmp_path, what, capsys):
    from pipeline.extract.__main__ import main

    store, path = _tampered(fp8_store, tmp_path, what)
    assert verify_store(store, checksums="all").checksums_checked == 36  # every checksum matches: resealed
    rc = main(["--verify", "--out", str(store)])
    out = capsys.readouterr().out
    assert rc == 2, out
    index = store_tamper.entries(store)[POSITION]["index"]
    assert f"{path} (sample {index}): key {TAMPERING[what][1]}" in out, out
    assert "intact" not in out


@pytest.mark.parametrize("what", sorted(TAMPERING))
def test_training_refuses_to_read_a_resealed_sample_that_means_nothing(fp8_store, tiny_target, tmp_path, what,
                                                                        capsys):
    """--checksums none: nothing is verified before training, so the refusal is the read's own."""
    from pipeline.train.__main__ import main

    store, path = _tampered(fp8_store, tmp_path, what)
    rc = main(["--store", str(store), "--target", str(tiny_target), "--out", str(tmp_path / "run"),
               "--checksums", "none", "--epochs", "1", "--batch-size", "36", "--max-len", "256", "--workers", "0",
               "--ttt-length", "1", "--val-share", "0", "--vocab-data", "store"])
    err = capsys.readouterr().err
    assert rc == 2, err
    index = store_tamper.entries(store)[POSITION]["index"]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"train: error: {path} (sample {index}): key {TAMPERING[what][1]}")
    assert lines[0].endswith("; re-extract it (or restore the store) and rerun"), lines[0]  # what to do, header or rows


def test_a_sampled_verify_says_what_it_did_not_read_and_a_full_one_reads_everything(fp8_store, capsys):
    from pipeline.extract.__main__ import main

    assert main(["--verify", "--out", str(fp8_store), "--sample", "2"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    report = verify_store(fp8_store, checksums="sample", sample=2, seed=0)
    unread = 36 - report.values_checked
    assert 0 < unread < 36 and report.headers_checked == 36
    assert "were not read" in line and "without --sample" in line and "intact" in line
    assert main(["--verify", "--out", str(fp8_store), "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["values_checked"] == full["checksums_checked"] == full["headers_checked"] == 36


def test_a_bf16_store_with_an_inf_value_at_a_masked_row_is_refused(reference_store, tmp_path, capsys):
    """A store of states as captured (fp32 on the CPU) is read for its values too."""
    store = tmp_path / "store"
    shutil.copytree(reference_store, store)

    def inf_where_masked(h, t):
        t["aux_hidden_state"][_masked_row(t), 7] = np.float32("inf")

    path = store_tamper.tamper(store, POSITION, inf_where_masked)
    report = verify_store(store, checksums="all")
    assert not report.ok and report.problems[0].startswith(f"{path} (sample ")
    assert "key aux_hidden_state holds 1 NaN or Inf values" in report.problems[0]


def test_a_full_verify_of_a_store_with_a_rotted_sample_does_not_ask_for_a_full_verify(fp8_store, tmp_path, capsys):
    """The sample whose checksum fails is not read for its values; the summary says why, rather
    than that a verify without --sample (this one) would read it."""
    from pipeline.extract.__main__ import main

    store = tmp_path / "store"
    shutil.copytree(fp8_store, store)
    store_tamper.rot_header_byte(store, 3)
    assert main(["--verify", "--out", str(store)]) == 2
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "36 checksums" in line and "the values of 1 samples were not read (left out by --sample, or failing" in line
    assert "without --sample" not in line, line
