"""The journal is read from its end and trusted for nothing: a huge journal answers `-n 5`
from its tail, and a line of valid JSON with fields of the wrong type is skipped and counted,
never a crash of `eagle3 journal` or of a view."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from console.cli import main
from console.core.records.journal import Journal
from tests.test_cli_saved_overrides import CFG  # a config with vars, a state dir and one phase

HOSTILE = [
    {"t": "yesterday", "event": "run_started", "phase": "train", "run_id": "r-text-t"},
    {"t": 1e308, "event": "run_started", "phase": "train", "run_id": "r-huge-t"},
    {"t": 1700000000.0, "event": "checks", "phase": "train", "results": ["x"]},
    {"t": 1700000000.0, "event": "run_ended", "phase": "train", "run_id": "r1", "code": "zero"},
]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    (tmp_path / "work" / "state").mkdir(parents=True)
    p = tmp_path / "j.yaml"
    p.write_text(CFG)
    return p


def _journal(cfg: Path) -> Journal:
    return Journal(cfg.parent / "work" / "state")


def _write(j: Journal, recs: list[dict]) -> None:
    with open(j.path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)


def test_records_of_the_wrong_types_are_skipped_and_counted_by_eagle3_journal(cfg, capsys):
    j = _journal(cfg)
    j.append("run_started", phase="train", run_id="good-1")
    _write(j, HOSTILE)
    j.append("run_ended", phase="train", run_id="good-1", code=0, duration_s=1.0, verify="pass")
    for argv in ([], ["--phase", "train"], ["--json"], ["-n", "5"]):
        capsys.readouterr()
        assert main(["journal", str(cfg), *argv]) == 0
        got = capsys.readouterr()
        assert "good-1" in got.out and "r-text-t" not in got.out and "r-huge-t" not in got.out
        assert f"skipped 4 line(s) of {j.path}" in got.err
    assert [r["run_id"] for r in j.read(phase="train")] == ["good-1", "good-1"]


@pytest.mark.parametrize("n", ["-1", "five"])
def test_a_count_that_is_not_one_is_refused_naming_the_flag(cfg, capsys, n):
    _journal(cfg).append("run_started", phase="train", run_id="good-1")
    rc = main(["journal", str(cfg), "-n", n])
    got = capsys.readouterr()
    assert rc == 2 and "-n" in got.err and n in got.err and "good-1" not in got.out, got


def test_a_view_of_a_phase_with_a_hostile_record_renders(cfg):
    from console.ui.components.logs.journal_view import render_records

    j = _journal(cfg)
    j.append("run_started", phase="train", run_id="good-1")
    _write(j, HOSTILE)
    text = render_records(j.read(phase="train", limit=50)).plain
    assert "good-1" in text


def test_tail_of_a_journal_far_larger_than_memory_is_read_from_its_end(cfg, tmp_path):
    """A 4 GB journal (sparse: no disk used) under a 1 GB memory ceiling: `-n 5` and the
    console's bounded read answer from the end instead of reading it whole."""
    j = _journal(cfg)
    with open(j.path, "wb") as f:
        f.truncate(4 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"\n")
    for i in range(8):
        j.append("run_started", phase="train", run_id=f"r{i}")
    probe = textwrap.dedent(f"""\
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from console.cli import main
        from console.core.records.journal import Journal
        recs = Journal({str(j.path.parent)!r}).read(phase="train", limit=50)
        assert [r["run_id"] for r in recs] == [f"r{{i}}" for i in range(8)], recs
        sys.exit(main(["journal", {str(cfg)!r}, "-n", "5"]))
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [line.split()[-1] for line in done.stdout.splitlines()] == ["r3", "r4", "r5", "r6", "r7"]


def test_a_journal_that_is_a_fifo_is_refused_not_waited_on(cfg):
    j = _journal(cfg)
    os.mkfifo(j.path)
    done = subprocess.run([sys.executable, "-m", "console", "journal", str(cfg)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert str(j.path) in done.stderr and "not a regular file" in done.stderr


@pytest.mark.parametrize("argv", [[], ["--json", "--phase", "train", "-n", "100000"]])
def test_a_whole_journal_is_printed_as_it_is_read_in_memory_far_below_its_size(argv, cfg, tmp_path):
    """`eagle3 journal` without `-n` on a 1 GB journal took 244 s and 6.0 GB: every record held,
    then the whole listing rendered at once. A 32 MiB journal here: the command's peak memory
    past its start stays under a quarter of the file, and every record is printed in order."""
    j = _journal(cfg)
    reason = "x" * 4000
    line = lambda i: json.dumps({"t": 1700000000.0 + i, "event": "override", "phase": "train",  # noqa: E731
                                 "check": f"c{i}", "reason": reason, "user": "op", "host": "h"}) + "\n"
    count = (32 << 20) // len(line(0))
    with open(j.path, "w", encoding="utf-8") as f:
        f.writelines(line(i) for i in range(count))
    size = j.path.stat().st_size
    probe = textwrap.dedent(f"""\
        import resource, sys
        from console.cli import main
        from console.core.lifecycle.project import Project
        Project.load({str(cfg)!r})
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        code = main(["journal", {str(cfg)!r}, *{argv!r}])
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(f"grown_kib={{grown}}", file=sys.stderr)
        sys.exit(code)
        """)
    out = tmp_path / "listing.txt"
    with open(out, "w") as sink:
        done = subprocess.run([sys.executable, "-c", probe], stdout=sink, stderr=subprocess.PIPE, text=True,
                              timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    grown = int(done.stderr.rsplit("grown_kib=", 1)[1].split()[0]) * 1024
    assert grown < size / 4, f"peak memory grew {grown >> 20} MiB printing a {size >> 20} MiB journal"
    if "--json" in argv:
        with open(out, encoding="utf-8") as f:
            checks = [r["check"] for r in json.load(f)]
    else:
        with open(out, encoding="utf-8") as f:
            checks = [text.split()[6] for text in f]
    assert checks == [f"c{i}" for i in range(count)]
