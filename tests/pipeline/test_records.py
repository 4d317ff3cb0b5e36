"""The records that cross a process: what a writer writes its reader reads back the same, a
file of a version the reader does not know is refused naming the file, the version and what
to do, and a file that is not the record (or is damaged) is refused by name, never half read."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import record_samples
from record_samples import local_report, server_report

from pipeline.program_edge import BadInput
from pipeline.records import (
    extract_estimate,
    merge_stats,
    regenerate_estimate,
    regenerate_stats,
    synthesis_estimate,
    synthesis_stats,
    train_estimate,
    train_summary,
)
from pipeline.records.codec import MalformedRecord, MissingRecord, NotFinite, NotThisRecord, RecordError, UnknownVersion
from pipeline.records.evaluate_report import KIND as EVALUATE
from pipeline.records.evaluate_report import read_report, write_report


def _printed(format_line):
    """An estimate's writer prints one line; here it lands in a file, as a config's command output would."""
    return lambda path, record: Path(path).write_text(format_line(record) + "\n")


def _parsed(parse):
    return lambda path: parse(Path(path).read_bytes(), str(path))


RECORDS = [pytest.param(EVALUATE, write_report, read_report, local_report(), id="evaluate-report-local"),
           pytest.param(EVALUATE, write_report, read_report, server_report(), id="evaluate-report-server"),
           pytest.param(merge_stats.KIND, merge_stats.write_stats, merge_stats.read_stats,
                        replace(record_samples.merge_stats([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}], "ab" * 32),
                                sources={"chats": replace(record_samples.merge_stats([], "").sources["tiny"],
                                                          input=record_samples.source_reading(4, skipped=1))}),
                        id="merge-stats"),
           pytest.param(regenerate_stats.KIND, regenerate_stats.write_stats, regenerate_stats.read_stats,
                        record_samples.regenerate_stats(), id="regenerate-stats"),
           pytest.param(synthesis_stats.KIND, synthesis_stats.write_stats, synthesis_stats.read_stats,
                        record_samples.synthesis_stats(), id="synthesis-stats"),
           pytest.param(train_summary.KIND, train_summary.write_summary, train_summary.read_summary,
                        record_samples.train_summary(), id="train-summary"),
           *(pytest.param(m.KIND, _printed(m.format_estimate), _parsed(m.parse_estimate), sample(), id=m.KIND.tag)
             for m, sample in ((train_estimate, record_samples.train_estimate),
                               (extract_estimate, record_samples.extract_estimate),
                               (regenerate_estimate, record_samples.regenerate_estimate),
                               (synthesis_estimate, record_samples.synthesis_estimate)))]


@pytest.mark.parametrize(("kind", "write", "read", "record"), RECORDS)
def test_what_the_writer_writes_the_reader_reads_back_the_same(tmp_path: Path, kind, write, read, record) -> None:
    path = tmp_path / "record.json"
    write(path, record)
    assert read(path) == record
    on_disk = json.loads(path.read_text())
    assert on_disk["record"] == kind.tag and on_disk["version"] == kind.version
    assert not [p for p in os.listdir(tmp_path) if p != "record.json"]  # no temp file left beside it


@pytest.mark.parametrize(("kind", "write", "read", "record"), RECORDS)
def test_a_version_the_reader_does_not_know_is_refused_naming_the_file_and_what_to_do(tmp_path: Path, kind, write,
                                                                                      read, record) -> None:
    path = tmp_path / "record.json"
    path.write_text(json.dumps({**kind.encode(record), "version": 999}))
    with pytest.raises(UnknownVersion) as e:
        read(path)
    said = str(e.value)
    assert said.startswith(f"{path}: ") and "version 999" in said and "knows version 1" in said
    assert "rerun" in said and kind.writer in said and "update" in said
    assert isinstance(e.value, BadInput) and e.value.exit_code == 2  # a stage exits 2 on it


@pytest.mark.parametrize(("kind", "write", "read", "record"), RECORDS)
def test_a_field_of_the_wrong_type_is_refused_naming_the_key(tmp_path: Path, kind, write, read, record) -> None:
    path = tmp_path / "record.json"
    obj = json.loads(kind.dumps(record))
    key = next(k for k, v in sorted(obj.items()) if type(v) in (int, float) and k != "version")
    obj[key] = "many"
    path.write_text(json.dumps(obj))
    with pytest.raises(MalformedRecord) as e:
        read(path)
    assert str(e.value).startswith(f'{path}: {key}: expected ') and 'got "many"' in str(e.value)


def test_a_nested_field_of_the_wrong_type_is_refused_naming_where_it_is(tmp_path: Path) -> None:
    obj = json.loads(EVALUATE.dumps(local_report()))
    obj["settings"][1]["speedup_estimate"] = "fast"
    (tmp_path / "r.json").write_text(json.dumps(obj))
    with pytest.raises(MalformedRecord, match=r'r\.json: settings\[1\]\.speedup_estimate: expected a number or null, '
                                              r'got "fast"'):
        read_report(tmp_path / "r.json")


def test_a_missing_key_is_refused_naming_it(tmp_path: Path) -> None:
    obj = EVALUATE.encode(local_report())
    del obj["best"]
    (tmp_path / "r.json").write_text(json.dumps(obj))
    with pytest.raises(MalformedRecord, match=r"r\.json: best: expected an object \(the key is missing\)"):
        read_report(tmp_path / "r.json")


def test_files_that_are_not_the_record_are_refused_by_name(tmp_path: Path) -> None:
    cases = {"list.json": "[1, 2]", "other.json": json.dumps({"record": "merge_stats", "version": 1}),
             "plain.json": json.dumps({"acceptance_length": 2.0}), "broken.json": '{"record": "evaluate_report"'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(NotThisRecord, match=rf"^{tmp_path / name}: "):
            read_report(tmp_path / name)
    with pytest.raises(MissingRecord, match="does not exist; run python -m pipeline.evaluate"):
        read_report(tmp_path / "absent.json")
    with pytest.raises(MissingRecord, match="^evaluate it first$"):
        read_report(tmp_path / "absent.json", missing="evaluate it first")


def test_a_fifo_or_an_oversized_file_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(RecordError, match="not a regular file"):
        read_report(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (EVALUATE.limit + 1))
    with pytest.raises(RecordError, match="more than the"):
        read_report(big)


def test_a_report_with_a_nan_figure_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    with pytest.raises(NotFinite, match="NaN or infinite; nothing is written"):
        write_report(path, local_report(acceptance_length=float("nan")))
    assert not path.exists()


def test_a_training_summary_before_its_first_logged_step_keeps_its_nan_figures(tmp_path: Path) -> None:
    """A run stopped before its first log has no loss yet: NaN, as the trainer wrote it, not a refusal."""
    path = tmp_path / "summary.json"
    train_summary.write_summary(path, record_samples.train_summary(loss=float("nan"), acc=(float("nan"),) * 3))
    got = train_summary.read_summary(path)
    assert got.loss != got.loss and all(a != a for a in got.acc) and got.steps == 30
