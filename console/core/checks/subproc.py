"""Running a program for a check with a hard time limit. The program gets its own
session and its output goes to temporary files, not pipes, so a grandchild that keeps
a pipe open cannot hang the check, and a timeout kills the whole session. The sessions
alive are listed, so a command line that is interrupted (`eagle3 check` under Ctrl-C,
SIGTERM or SIGHUP) kills them too: its children are in sessions of their own, out of the
terminal's reach, and would otherwise live on under init."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

MAX_OUTPUT = 16 * 2**20
_live: set[int] = set()
_live_lock = threading.Lock()


@dataclass
class Completed:
    argv: list[str]
    code: int | None  # None when it did not start or timed out
    stdout: str
    stderr: str
    timed_out: bool = False
    error: str | None = None  # why it did not start

    def tail(self, n: int = 10) -> list[str]:
        """The last n non-empty lines of stdout and stderr, in that order."""
        lines = [ln for ln in (self.stdout + "\n" + self.stderr).splitlines() if ln.strip()]
        return [ln[:300] for ln in lines[-n:]]


def program(argv: list[str]) -> str:
    """A command as an operator names it in one breath: `python -m pipeline.regenerate`,
    `python -c …` (a script elided, never quoted), `nvidia-smi -L`."""
    if not argv:
        return "(no command)"
    head = os.path.basename(str(argv[0]))
    rest = [str(a) for a in argv[1:]]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return f"{head} -m {rest[1]}"
    if rest[:1] == ["-c"]:
        return f"{head} -c …"
    words = [head]
    for word in rest[:2]:
        if len(" ".join(words + [word])) > 40:
            break
        words.append(word)
    return " ".join(words) + (" …" if len(words) < len(argv) else "")


def _read(f: IO[bytes]) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - MAX_OUTPUT))
    return f.read().decode("utf-8", "replace")


def _kill_session(sid: int) -> None:
    """SIGKILL a check's process group and every other process of its session."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid:
                p.kill()
        except (OSError, psutil.Error):
            continue


def kill_live() -> int:
    """Kill every check command still running in this process; how many there were."""
    with _live_lock:
        sids = list(_live)
    for sid in sids:
        _kill_session(sid)
    return len(sids)


atexit.register(kill_live)  # a console that quits mid-check: its check threads are daemons


def run_bounded(argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> Completed:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=env, start_new_session=True)
        except FileNotFoundError:
            where = "" if "/" in argv[0] else " on PATH"
            return Completed(argv, None, "", "", error=f"command not found{where}: {argv[0]}")
        except PermissionError:
            return Completed(argv, None, "", "", error=f"not executable: {argv[0]}")
        except OSError as e:
            return Completed(argv, None, "", "", error=f"cannot start {argv[0]}: {e.strerror or e}")
        with _live_lock:
            _live.add(proc.pid)
        try:
            code: int | None = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            proc.wait()
            code, timed_out = None, True
        finally:
            with _live_lock:
                _live.discard(proc.pid)
        return Completed(argv, code, _read(out), _read(err), timed_out=timed_out)
