"""`eagle3 run --until`: a deadline stops the live phases as the console's `s` does, they read
stopped (resumable) and the next walk resumes them; the exit code says so; a phase that ignores
SIGTERM is killed after its grace; the deadline holds with the CLI that set it gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from console.cli import main
from console.cli.edge import EXIT_DEADLINE, EXIT_FAIL, EXIT_OK

REPO = Path(__file__).resolve().parents[1]

# `work` counts until work/release exists; SIGTERM saves the count and exits 3 (as train
# checkpoints and exits 3), and a rerun continues from the saved count.
WORK = textwrap.dedent("""\
    import os, signal, sys, time
    n = int(open('work/count.txt').read()) if os.path.exists('work/count.txt') else 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    print('resuming at', n, flush=True)
    open('work/started', 'w').close()
    for _ in range(12000):
        if stop:
            open('work/count.txt', 'w').write(str(n)); print('checkpointed at', n, flush=True); sys.exit(3)
        if os.path.exists('work/release'):
            break
        n += 1
        time.sleep(0.05)  # wait-ok: the stand-in phase's work, a count a tick
    open('work/count.txt', 'w').write(str(n)); print('finished at', n, flush=True)
    """)

STUBBORN = textwrap.dedent("""\
    import signal, time
    signal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))
    open('work/started', 'w').close()
    for _ in range(12000):
        time.sleep(0.05)  # wait-ok: a phase that ignores SIGTERM, killed at its grace
    """)


def config(tmp_path: Path, first: str) -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    p = tmp_path / "deadline.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: deadline
        vars:
          work: ./work
        state_dir: ${{work}}/state
        phases:
          - id: work
            run: [python, -c, {json.dumps(first)}]
          - id: after
            needs: [work]
            run: [python, -c, "print('after ran')"]
        """))
    return p


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # wait-ok: polling a file the phase writes, under a deadline


def status(cfg: Path, capsys) -> dict[str, dict]:
    capsys.readouterr()
    main(["status", str(cfg), "--json"])
    return {p["phase"]: p for p in json.loads(capsys.readouterr().out)["phases"]}


def journal(cfg: Path, capsys, event: str) -> list[dict]:
    capsys.readouterr()
    assert main(["journal", str(cfg), "--json"]) == EXIT_OK
    return [r for r in json.loads(capsys.readouterr().out) if r["event"] == event]


def test_until_stops_the_live_phase_which_reads_resumable_and_the_next_walk_resumes_it(tmp_path, capsys) -> None:
    cfg = config(tmp_path, WORK)
    work = tmp_path / "work"
    assert main(["run", str(cfg), "work"]) == EXIT_OK
    wait_for(lambda: (work / "started").exists(), "the phase to start")

    code = main(["run", str(cfg), "--all", "--until", "1s"])
    cap = capsys.readouterr()
    assert code == EXIT_DEADLINE != EXIT_FAIL
    assert "checkpointed at" in cap.out  # the phase's own graceful stop, streamed
    assert "stopped at the deadline" in cap.out
    assert "the deadline" in cap.err and "not done: work, after" in cap.err
    saved = int((work / "count.txt").read_text())
    assert saved > 0

    st = status(cfg, capsys)
    assert st["work"]["state"] == "stopped" and st["work"]["exit_code"] == 3
    assert st["work"]["deadline"] is not None and "stopped at the deadline" in st["work"]["reason"]
    assert st["after"]["state"] == "pending"  # no phase started past the deadline
    stops = journal(cfg, capsys, "stop")
    assert [s["phase"] for s in stops] == ["work"]
    assert stops[0]["deadline"] == st["work"]["deadline"] and "stopped at the deadline" in stops[0]["reason"]
    assert journal(cfg, capsys, "run_ended")[0]["deadline"] == st["work"]["deadline"]
    assert [r["phase"] for r in journal(cfg, capsys, "run_started")] == ["work"]

    (work / "release").write_text("")
    code = main(["run", str(cfg), "--all"])  # the deadline has passed: it holds nothing back now
    cap = capsys.readouterr()
    assert code == EXIT_OK, cap.err
    assert f"resuming at {saved}" in cap.out and "after ran" in cap.out
    st = status(cfg, capsys)
    assert st["work"]["state"] == "done" and st["after"]["state"] == "done"


def test_a_phase_that_ignores_sigterm_is_killed_after_its_grace_and_reported_so(tmp_path, capsys) -> None:
    cfg = config(tmp_path, STUBBORN)
    assert main(["run", str(cfg), "work"]) == EXIT_OK
    wait_for(lambda: (tmp_path / "work" / "started").exists(), "the phase to start")

    code = main(["run", str(cfg), "--all", "--until", "1s", "--grace", "1"])
    cap = capsys.readouterr()
    assert code == EXIT_DEADLINE
    assert "ignoring SIGTERM" in cap.out and "killed at the deadline" in cap.out

    st = status(cfg, capsys)["work"]
    assert st["state"] == "stopped" and st["exit_code"] is None
    assert "killed at the deadline" in st["reason"] and "grace" in st["reason"]
    ended = journal(cfg, capsys, "run_ended")[0]
    assert ended["signal"] == signal.SIGKILL and ended["deadline"] == st["deadline"]


def test_the_deadline_holds_when_the_cli_that_set_it_is_gone(tmp_path, capsys) -> None:
    """The launcher of each run enforces it: kill the walk that set it (an SSH drop) and the
    phase is still stopped at the deadline."""
    cfg = config(tmp_path, WORK)
    work = tmp_path / "work"
    assert main(["run", str(cfg), "work"]) == EXIT_OK
    wait_for(lambda: (work / "started").exists(), "the phase to start")
    walk = subprocess.Popen([sys.executable, "-m", "console", "run", str(cfg), "--all", "--until", "3s"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    assert walk.stdout is not None
    assert walk.stdout.readline().startswith("deadline ")
    os.killpg(walk.pid, signal.SIGKILL)
    walk.wait(timeout=30)

    wait_for(lambda: status(cfg, capsys)["work"]["state"] == "stopped", "the deadline's stop")
    st = status(cfg, capsys)["work"]
    assert st["deadline"] is not None and "stopped at the deadline" in st["reason"]
    assert (work / "count.txt").exists()  # its graceful stop ran: the count was saved


def test_until_rejects_what_is_not_a_deadline_and_off_clears_one(tmp_path, capsys) -> None:
    cfg = config(tmp_path, WORK)
    for bad in ("soon", "25:00", "0s", "40d"):
        capsys.readouterr()
        assert main(["run", str(cfg), "--all", "--until", bad]) == 2
        assert "--until" in capsys.readouterr().err
    assert main(["run", str(cfg), "after", "--until", "2h"]) == EXIT_FAIL  # set, then the start is blocked
    assert "deadline " in capsys.readouterr().out
    assert json.loads((tmp_path / "work" / "state" / "deadline.json").read_text())["grace"] == 10.0
    capsys.readouterr()
    assert main(["status", str(cfg)]) == EXIT_OK
    assert "deadline " in capsys.readouterr().out
    assert main(["status", str(cfg), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["deadline"]["how"] == "eagle3 run --until 2h"
    assert main(["run", str(cfg), "after", "--until", "off"]) == EXIT_FAIL
    assert "deadline cleared" in capsys.readouterr().out
    assert not (tmp_path / "work" / "state" / "deadline.json").exists()
    assert [r["event"] for r in journal(cfg, capsys, "deadline")] == ["deadline"]


@pytest.mark.parametrize("text,expect", [("8m30s", 510.0), ("2h", 7200.0), ("90", 90.0)])
def test_until_takes_durations_as_the_console_prints_them(text, expect) -> None:
    from console.core.runs.deadline import parse_until

    assert parse_until(text, 1000.0) == 1000.0 + expect


def test_until_takes_the_next_time_of_day_to_come() -> None:
    from console.core.runs.deadline import parse_until

    now = time.mktime((2030, 6, 1, 14, 0, 0, 0, 0, -1))
    assert parse_until("14:05", now) == now + 300
    assert parse_until("13:55:30", now) == now + 86400 - 270  # today's has passed: tomorrow's


def test_a_deadline_file_that_is_not_one_is_named_and_off_clears_it(tmp_path, capsys) -> None:
    cfg = config(tmp_path, WORK)
    state = tmp_path / "work" / "state"
    state.mkdir(parents=True)
    (state / "deadline.json").write_text('{"at": "soon"')
    assert main(["run", str(cfg), "--all"]) == EXIT_FAIL
    err = capsys.readouterr().err
    assert "deadline.json: not a deadline" in err and "delete the file" in err
    assert main(["run", str(cfg), "after", "--until", "off"]) == EXIT_FAIL  # cleared; after is still blocked
    assert "deadline cleared" in capsys.readouterr().out and not (state / "deadline.json").exists()


def test_a_phase_whose_launcher_is_gone_gets_the_deadline_stop_from_the_walk(tmp_path, capsys, monkeypatch) -> None:
    from console.core.flow import runall
    from console.core.runs import manager

    monkeypatch.setattr(runall, "BACKSTOP_S", 0.5)
    cfg = config(tmp_path, WORK)
    work = tmp_path / "work"
    assert main(["run", str(cfg), "work"]) == EXIT_OK
    wait_for(lambda: (work / "started").exists(), "the phase to start")
    run = manager.latest_run(work / "state", "work")
    os.kill(run.read_pid().pid, signal.SIGKILL)  # the launcher, not the phase: nobody to keep the deadline
    wait_for(lambda: "launcher" in " ".join(manager.run_status(run).reasons), "the launcher to be gone")

    assert main(["run", str(cfg), "--all", "--until", "1s", "--grace", "5"]) == EXIT_DEADLINE
    st = status(cfg, capsys)["work"]
    assert st["state"] == "stopped" and "stopped at the deadline" in st["reason"]
    assert (work / "count.txt").exists()  # the phase's own graceful stop ran
    assert journal(cfg, capsys, "stop")[0]["deadline"] == st["deadline"]


def test_no_phase_starts_past_the_deadline_and_one_verifying_then_finishes(tmp_path, capsys) -> None:
    """`slow-verify` exits 0 at once and verifies for seconds: the deadline passes meanwhile, its
    verification ends (done, not stopped), and `next`, ready by then, is not started."""
    (tmp_path / "work").mkdir()
    cfg = tmp_path / "verify.yaml"
    cfg.write_text(textwrap.dedent("""\
        name: verify
        vars:
          work: ./work
        state_dir: ${work}/state
        phases:
          - id: slow-verify
            run: [python, -c, "print('made')"]
            verify:
              - command: [python, -c, "import time; time.sleep(5)"]  # wait-ok: a verify still running when the deadline comes
                name: takes-a-while
          - id: next
            run: [python, -c, "print('next ran')"]
        """))
    from console.core.runs import manager

    assert main(["run", str(cfg), "slow-verify"]) == EXIT_OK
    run = manager.latest_run(tmp_path / "work" / "state", "slow-verify")
    wait_for(lambda: run.verifying_file.exists(), "its verification to begin")
    code = main(["run", str(cfg), "--all", "--until", "1s"])
    cap = capsys.readouterr()
    assert code == EXIT_DEADLINE, cap.err
    assert "not done: next" in cap.err and "next ran" not in cap.out
    st = status(cfg, capsys)
    assert st["slow-verify"]["state"] == "done" and st["next"]["run_id"] is None
