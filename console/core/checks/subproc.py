"""Running a program for a check with a hard time limit. The program gets its own
session and its output goes to temporary files, not pipes, so a grandchild that keeps
a pipe open cannot hang the check, and a timeout kills the whole group."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT = 16 * 2**20


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


def _read(f) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - MAX_OUTPUT))
    return f.read().decode("utf-8", "replace")


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
        try:
            code: int | None = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            code, timed_out = None, True
        return Completed(argv, code, _read(out), _read(err), timed_out=timed_out)
