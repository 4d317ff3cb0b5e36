"""A path that is not a file (a FIFO nobody writes, /dev/zero) handed to a stage as a JSON
input or a source dataset: refused at once with exit 2 naming it, never a stage that blocks
for ever or reads until memory runs out. Each case runs in a child with a deadline and a
memory ceiling, so a regression fails here instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEADLINE_S = 120  # far above the child's start-up on a loaded machine; a blocked read never ends
CEILING = 2 << 30


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CEILING, CEILING))


def _child(code: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S,
                              preexec_fn=_limit_memory, env={**os.environ})
    except subprocess.TimeoutExpired:
        pytest.fail(f"still reading after {DEADLINE_S} s: the path was opened as if it were a file")


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "stats.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_json_input_that_is_not_a_file_is_refused_naming_it(kind, fifo, tmp_path):
    path = fifo if kind == "fifo" else Path("/dev/zero")
    proc = _child("import sys\n"
                  "from pipeline.jsonfile import read_json\n"
                  "from pipeline.program_edge import run_program\n"
                  f"sys.exit(run_program('stage', lambda: read_json({str(path)!r}, 'missing') and 0))")
    assert proc.returncode == 2, proc.stderr
    assert f"stage: error: {path}: cannot be read" in proc.stderr and "not a regular file" in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_source_dataset_that_is_not_a_file_is_refused_by_the_reader_merge_and_regenerate_share(kind, fifo):
    source = fifo if kind == "fifo" else Path("/dev/zero")
    proc = _child("import sys\n"
                  "from pipeline.chat.sources import SourcePolicy, SourceReport, iter_records\n"
                  "from pipeline.program_edge import run_program\n"
                  f"body = lambda: len(list(iter_records({str(source)!r}, 's', SourcePolicy(), SourceReport('s')))) and 0\n"
                  "sys.exit(run_program('regenerate', body))")
    assert proc.returncode == 2, proc.stderr
    assert f"regenerate: error: {source}: is a" in proc.stderr and "not a regular file" in proc.stderr
