"""An operator who interrupts `eagle3 check` (Ctrl-C, a kill, a dropped SSH session)
leaves no check command behind: they run in sessions of their own, which the terminal's
signals never reach, so the CLI kills them itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)  # wait-ok: polling a condition with a deadline
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "sighup"])
def test_interrupting_eagle3_check_kills_its_check_commands(tmp_path: Path, sig: signal.Signals) -> None:
    pidfile = tmp_path / "check.pid"
    script = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(300)"  # wait-ok: the check's own hang
    cfg = tmp_path / "p.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        name: x
        phases:
          - id: a
            run: [python, -c, "print(1)"]
            checks:
              - command: {{argv: [python, -c, "{script}"], timeout: 600}}
        """))
    proc = subprocess.Popen([sys.executable, "-m", "console", "check", str(cfg)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child = 0
    try:
        child = _wait(lambda: pidfile.exists() and pidfile.read_text() and int(pidfile.read_text()), 60,
                      "the check command to start")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + sig, err
        assert "eagle3:" in err and "Traceback" not in err
        _wait(lambda: not _alive(child), 10, f"the check command {child} to die with eagle3 check")
    finally:
        if proc.poll() is None:
            proc.kill()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_process_that_exits_while_a_check_runs_takes_the_check_command_with_it(tmp_path: Path) -> None:
    """The console quitting (or any caller exiting) while a check thread waits on its
    command: the daemon thread dies silently, so the command is killed at exit."""
    pidfile = tmp_path / "check.pid"
    code = textwrap.dedent(f"""\
        import sys, threading, time
        from pathlib import Path
        from console.core.checks.subproc import run_bounded
        cmd = [sys.executable, "-c", "import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(300)"]  # wait-ok: the stray check command's own life
        threading.Thread(target=run_bounded, args=(cmd, Path('.'), 600), daemon=True).start()
        while not Path({str(pidfile)!r}).exists() or not Path({str(pidfile)!r}).read_text():
            time.sleep(0.05)  # wait-ok: polls for the pid file
        """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    child = int(pidfile.read_text())
    try:
        _wait(lambda: not _alive(child), 10, "the check command to die with its caller")
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
