"""Notifier commands: run detached with the phase, state, run id and summary as
placeholders and environment; bounded by a timeout; journaled; never raising."""

from __future__ import annotations

import sys
from pathlib import Path

from core_harness import config_for, wait_for

from console.core.lifecycle.notify import Notifier
from console.core.model.config import NotifySpec, Phase
from console.core.records.journal import Journal


def _notifier(tmp_path: Path, *specs: NotifySpec, phase_specs: tuple[NotifySpec, ...] = ()) -> Notifier:
    ph = Phase(id="extract", title="Extract", argv=("true",), notify=phase_specs)
    cfg = config_for(tmp_path, ph)
    cfg = cfg.__class__(**{**cfg.__dict__, "notify": specs})
    return Notifier(cfg, Journal(cfg.state_dir))


def _notify_records(tmp_path: Path) -> list[dict]:
    return Journal(tmp_path / "state").read(events={"notify"})


def test_a_notifier_gets_the_phase_state_run_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "note.txt"
    script = ("import os, sys; open(sys.argv[1], 'w').write(' '.join(sys.argv[2:]) + '|' + "
              "os.environ['EAGLE3_PHASE'] + ' ' + os.environ['EAGLE3_STATE'] + ' ' + os.environ['EAGLE3_RUN_ID']"
              " + ' ' + os.environ['EAGLE3_NOTIFY_EVENT'] + ' ' + os.environ['EAGLE3_SUMMARY'])")
    n = _notifier(tmp_path, NotifySpec(argv=(sys.executable, "-c", script, str(out), "{phase}", "{state}", "{run_id}"),
                                       on=("failed",)))
    assert n.fire("ended", "extract", "done", "r1", "fine") == 0  # not subscribed to `ended`
    assert n.fire("failed", "extract", "failed", "r2", "exit code 3\nsecond line") == 1
    text = wait_for(lambda: out.exists() and out.read_text(), what="the notifier's file")
    assert text == "extract failed r2|extract failed r2 failed exit code 3 second line"
    rec = wait_for(lambda: _notify_records(tmp_path), what="the notify journal record")[-1]
    assert rec["phase"] == "extract" and rec["on"] == "failed" and rec["exit_code"] == 0
    assert rec["command"] == [sys.executable]  # the program only: arguments may carry tokens


def test_a_hanging_notifier_is_killed_at_its_timeout_and_journaled(tmp_path: Path) -> None:
    n = _notifier(tmp_path, NotifySpec(argv=(sys.executable, "-c", "import time; time.sleep(60)"), timeout=1.0))  # wait-ok: the phase program's own work, not a test pause
    assert n.fire("stalled", "extract", "running", "r1", "silent") == 1
    rec = wait_for(lambda: _notify_records(tmp_path), timeout=20, what="timeout record")[-1]
    assert rec["timed_out"] is True and rec["took_s"] < 30


def test_a_missing_notifier_is_journaled_and_does_not_raise(tmp_path: Path) -> None:
    n = _notifier(tmp_path, phase_specs=(NotifySpec(argv=("/nonexistent/eagle3-notify",)),))
    assert n.fire("blocked", "extract", "blocked", None, "checks fail") == 1
    rec = wait_for(lambda: _notify_records(tmp_path), what="error record")[-1]
    assert "could not start /nonexistent/eagle3-notify" in rec["error"]
    assert n.fire("ended", "no-such-phase", "done", "r", "x") == 0  # config-wide only; none here


def test_notify_and_stall_after_keys_load_and_bad_ones_name_the_key(tmp_path: Path) -> None:
    import pytest

    from console.core.config.loader import load_config
    from console.core.text.errors import ConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: n\nnotify:\n  - run: [notify-send, '{phase} {state}']\n    on: [failed, stalled]\n"
                   "    timeout: 5s\nphases:\n  - id: a\n    run: [true]\n    stall_after: 15m\n"
                   "    notify: ['mail -s {summary} ops']\n")
    c = load_config(cfg)
    assert c.notify[0] == NotifySpec(argv=("notify-send", "{phase} {state}"), on=("failed", "stalled"), timeout=5.0)
    assert c.phases[0].stall_after == 900 and c.phases[0].notify[0].argv == ("mail", "-s", "{summary}", "ops")
    cfg.write_text(cfg.read_text().replace("[failed, stalled]", "[failed, stoled]"))
    with pytest.raises(ConfigError, match=r"c.yaml:4: notify\[0\].on: 'stoled' .*did you mean 'stalled'"):
        load_config(cfg)


def test_two_consoles_send_one_notification_per_run_event(tmp_path: Path) -> None:
    out = tmp_path / "sent.txt"
    spec = NotifySpec(argv=(sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write('x')", str(out)))
    first, second = _notifier(tmp_path, spec), _notifier(tmp_path, spec)
    assert first.fire("failed", "extract", "failed", "r1", "exit 3") == 1
    assert second.fire("failed", "extract", "failed", "r1", "exit 3") == 0  # the browser tab's console
    assert second.fire("failed", "extract", "failed", "r2", "exit 3") == 1  # another run: sent
    wait_for(lambda: len(_notify_records(tmp_path)) == 2, what="two notifier runs")
    assert out.read_text() == "xx"


def _run_in_child(payload: dict, tmp_path: Path) -> dict:
    """`notify._run` in a fresh interpreter held to 1 GiB of address space, printing its
    result and its peak memory, so a runner that hoards output fails here, not the host."""
    import json
    import subprocess

    # VmHWM is this interpreter's own peak: ru_maxrss would also count the pytest process the
    # child was forked from (torch and all, once the whole suite is collected)
    code = ("import json, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30));"
            "from console.core.lifecycle.notify import _run; r = _run(json.loads(sys.argv[1]));"
            "r['peak_kb'] = next(int(ln.split()[1]) for ln in open('/proc/self/status') if ln.startswith('VmHWM:'));"
            "print(json.dumps(r))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(payload)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**__import__("os").environ,
                                                          "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_notifier_that_prints_without_end_is_cut_at_its_timeout_in_bounded_memory(tmp_path: Path) -> None:
    r = _run_in_child({"argv": ["yes", "a chatty notifier"], "timeout": 2}, tmp_path)
    assert r["timed_out"] is True and r["output"] == "a chatty notifier"
    assert r["peak_kb"] < 200 * 1024  # the tail is 64 KB; `communicate()` kept gigabytes


def test_a_notifier_killed_mid_line_reports_its_last_whole_line(tmp_path: Path) -> None:
    script = "import sys, time; sys.stdout.write('said this\\nhal'); sys.stdout.flush(); time.sleep(60)"  # wait-ok
    r = _run_in_child({"argv": [sys.executable, "-c", script], "timeout": 1}, tmp_path)
    assert r["timed_out"] is True and r["output"] == "said this"


def test_a_notifier_child_that_left_its_group_dies_at_the_timeout(tmp_path: Path) -> None:
    import os

    pidfile = tmp_path / "child.pid"
    script = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid(); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)\n"  # wait-ok: the stray's own life
              "print('sent')\n")
    r = _run_in_child({"argv": [sys.executable, "-c", script, str(pidfile)], "timeout": 2}, tmp_path)
    assert r["exit_code"] == 0 and r["output"] == "sent"
    pid = int(pidfile.read_text())

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    try:
        assert wait_for(gone, timeout=10, what="the setsid child to be killed")
    finally:
        if not gone():
            os.kill(pid, 9)
