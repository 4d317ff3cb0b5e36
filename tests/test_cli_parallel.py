"""`eagle3 run --all --parallel N`: independent phases run at once and a phase that needs them
waits for both; their logs stream a whole line at a time under their names; a failure starts
nothing more but lets the others finish; the space checks of phases starting together judge
the sum of their needs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from console.cli import main
from console.cli.edge import EXIT_FAIL, EXIT_OK, EXIT_USAGE
from console.core.checks import disk
from console.core.flow import runall

# Each side waits until the other has started: both end well only if they ran at the same time.
# A side told to fail (work/<me>.fail) exits 4; the other then runs on until that end is recorded.
SIDE = textwrap.dedent("""\
    import glob, os, sys, time
    me, other = sys.argv[1], sys.argv[2]
    open(f'work/{me}.started', 'w').close()
    for _ in range(1200):
        if os.path.exists(f'work/{other}.started'):
            break
        time.sleep(0.05)  # wait-ok: a poll for the other side, bounded by the loop
    else:
        print(me, 'never saw', other, 'start', flush=True); sys.exit(1)
    for i in range(3):
        for piece in range(4):  # one line written in pieces: it must reach the stream whole
            sys.stdout.write(me[0] * 5); sys.stdout.flush(); time.sleep(0.02)  # wait-ok: pieces apart in time
        print(flush=True)
    if os.path.exists(f'work/{me}.fail'):
        sys.exit(4)
    for _ in range(1200):
        if not os.path.exists(f'work/{other}.fail') or glob.glob(f'work/state/runs/{other}/*/exit'):
            break
        time.sleep(0.05)  # wait-ok: a poll for the other's end, bounded by the loop
    """)

PHASES = """\
      - id: left
        run: [python, side.py, left, right]
      - id: right
        run: [python, side.py, right, left]
      - id: extra
        run: [python, -c, "print('extra ran')"]
      - id: both
        needs: [left, right]
        run: [python, -c, "print('both ran')"]
"""

ROOMY = """\
      - id: one
        run: [python, -c, "print('one ran')"]
        checks:
          - free_space: {path: "${work}", need: 600MB}
      - id: two
        run: [python, -c, "print('two ran')"]
        checks:
          - free_space: {path: "${work}", need: 600MB}
"""


def config(tmp_path: Path, phases: str = PHASES, top: str = "") -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "side.py").write_text(SIDE)
    cfg = tmp_path / "par.yaml"
    cfg.write_text("name: par\nvars:\n  work: ./work\nstate_dir: ${work}/state\n" + top + "phases:\n"
                   + textwrap.indent(textwrap.dedent(phases), "  "))
    return cfg


def status(cfg: Path, capsys) -> dict[str, dict]:
    capsys.readouterr()
    main(["status", str(cfg), "--json"])
    return {p["phase"]: p for p in json.loads(capsys.readouterr().out)["phases"]}


def test_two_independent_phases_run_at_once_and_the_one_that_needs_both_waits(tmp_path, capsys) -> None:
    cfg = config(tmp_path)
    code = main(["run", str(cfg), "--all", "--parallel", "2"])
    cap = capsys.readouterr()
    assert code == EXIT_OK, cap.err
    st = status(cfg, capsys)
    assert all(st[p]["state"] == "done" for p in st)
    left, right, both = st["left"], st["right"], st["both"]
    # their own records: each started before the other ended
    assert left["started_at"] < right["ended_at"] and right["started_at"] < left["ended_at"]
    assert both["started_at"] >= max(left["ended_at"], right["ended_at"])
    # each phase's lines under its name, whole, though written in pieces beside the other's
    assert cap.out.count("[left] " + "l" * 20 + "\n") == 3 and cap.out.count("[right] " + "r" * 20 + "\n") == 3
    streamed = [ln for ln in cap.out.splitlines() if ln.startswith(("[left] ", "[right] ")) and "eagle3" not in ln]
    assert streamed and all(ln in ("[left] " + "l" * 20, "[right] " + "r" * 20) for ln in streamed), streamed
    assert "[both] both ran" in cap.out


def test_parallel_comes_from_the_config(tmp_path, capsys) -> None:
    cfg = config(tmp_path, top="parallel: 2\n")
    code = main(["run", str(cfg), "--all"])
    cap = capsys.readouterr()
    assert code == EXIT_OK, cap.err
    assert "up to 2 phases at once" in cap.out
    assert all(p["state"] == "done" for p in status(cfg, capsys).values())
    assert main(["run", str(cfg), "left", "--parallel", "2"]) == EXIT_USAGE  # --parallel is for --all


def test_a_failure_starts_nothing_more_and_lets_the_live_phase_finish(tmp_path, capsys) -> None:
    cfg = config(tmp_path)
    (tmp_path / "work" / "left.fail").write_text("")
    code = main(["run", str(cfg), "--all", "--parallel", "2"])
    cap = capsys.readouterr()
    assert code == EXIT_FAIL
    assert "stopped at left" in cap.err and "while right runs on" in cap.err
    assert "right done" in cap.out  # its outcome is reported too
    st = status(cfg, capsys)
    assert st["left"]["state"] == "failed" and st["left"]["exit_code"] == 4
    assert st["right"]["state"] == "done"  # it ran to its end after left failed
    assert st["extra"]["run_id"] is None and st["both"]["run_id"] is None  # nothing started after the failure


def test_the_space_checks_of_phases_starting_together_sum_their_needs(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(disk, "free_bytes", lambda path: (1_000_000_000, 4_000_000_000))
    cfg = config(tmp_path, ROOMY)
    code = main(["run", str(cfg), "--all", "--parallel", "2"])
    cap = capsys.readouterr()
    assert code == EXIT_FAIL
    # one starts; two, beside it, needs its 600 MB plus one's 600 MB of the 1 GB free
    assert "plus 600.0 MB for one (starting beside it): 1.2 GB in all, only 1.0 GB free" in cap.err
    st = status(cfg, capsys)
    assert st["one"]["state"] == "done" and st["two"]["run_id"] is None
    # one at a time, each has the room it needs
    assert main(["run", str(cfg), "--all"]) == EXIT_OK
    assert status(cfg, capsys)["two"]["state"] == "done"


def test_each_phase_of_a_parallel_walk_gets_its_share_of_the_cores(tmp_path, capsys, monkeypatch) -> None:
    """Two torch stages side by side on torch's default would each take every core; the walk
    hands each its share through OMP_NUM_THREADS, and a phase whose config sets it keeps that."""
    monkeypatch.setattr(runall, "usable_cores", lambda: 8)
    show = "[python, -c, \"import os; print('threads', os.environ.get('OMP_NUM_THREADS'))\"]"
    cfg = config(tmp_path, f"""\
      - id: free
        run: {show}
      - id: pinned
        run: {show}
        env: {{OMP_NUM_THREADS: "3"}}
    """)
    code = main(["run", str(cfg), "--all", "--parallel", "2"])
    cap = capsys.readouterr()
    assert code == EXIT_OK, cap.err
    assert "[free] threads 4" in cap.out and "[pinned] threads 3" in cap.out
