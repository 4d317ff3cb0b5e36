"""One run of a phase as files on disk (docs/internals.md, "Run directory").

The files are the only link between a phase and whoever watches it: the console or CLI
that started a run may die at any moment, and a later one reconstructs everything from
here. So every file that states a fact (pid, exit, verify.json) is replaced atomically:
a reader sees the old content or the new one, never half of it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.core.checks.result import CheckResult
from console.core.files.atomicfile import atomic_write_json

ARGV = "argv.json"
OUTPUT = "output.log"
EVENTS = "events.jsonl"
PID = "pid"
EXIT = "exit"
VERIFY = "verify.json"
STOPPING = "stopping"
VERIFYING = "verifying"

RUN_DIR_ENV = "EAGLE3_RUN_DIR"  # inherited by every process of a run: how stop finds strays


def new_run_id(now: float | None = None) -> str:
    """UTC time then a short random suffix: sorts by start time, unique without a lock."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class PidInfo:
    """The launcher (pid, start_time) and, once started, the phase process. Start times
    are the raw values `procs.start_time` returns, compared as-is to detect pid reuse."""

    pid: int
    start_time: float | None
    child_pid: int | None = None
    child_start_time: float | None = None
    started_at: float | None = None  # unix time the launcher wrote the file

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "child_pid": self.child_pid,
                "child_start_time": self.child_start_time, "started_at": self.started_at}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PidInfo:
        return cls(pid=int(d["pid"]), start_time=d.get("start_time"),
                   child_pid=d.get("child_pid"), child_start_time=d.get("child_start_time"),
                   started_at=d.get("started_at"))


@dataclass(frozen=True)
class ExitInfo:
    """How the phase process ended: `code` is None when a signal killed it (`signal` says
    which); `stopped` is True when an operator asked for the stop."""

    code: int | None
    signal: int | None
    ended_at: float
    stopped: bool = False
    error: str | None = None  # the launcher's own failure, when it had one
    deadline: float | None = None  # the stop was the project's deadline, set for this time

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"code": self.code, "signal": self.signal,
                             "ended_at": self.ended_at, "stopped": self.stopped}
        if self.error:
            d["error"] = self.error
        if self.deadline is not None:
            d["deadline"] = self.deadline
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExitInfo:
        deadline = d.get("deadline")
        return cls(code=d.get("code"), signal=d.get("signal"), ended_at=float(d.get("ended_at") or 0.0),
                   stopped=bool(d.get("stopped")), error=d.get("error"),
                   deadline=float(deadline) if isinstance(deadline, (int, float)) else None)


def _read_json(path: Path) -> Any | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


class RunDir:
    """`<state>/runs/<phase>/<run-id>/`. Readers return None for a file that is absent
    (or, for a file written by hand, unreadable) rather than raising: an absent file is a
    state (not started yet, still running), not an error."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def phase_id(self) -> str:
        return self.path.parent.name

    @property
    def state_dir(self) -> Path:
        return self.path.parent.parent.parent

    @property
    def argv_json(self) -> Path:
        return self.path / ARGV

    @property
    def output_log(self) -> Path:
        return self.path / OUTPUT

    @property
    def events_jsonl(self) -> Path:
        return self.path / EVENTS

    @property
    def pid_file(self) -> Path:
        return self.path / PID

    @property
    def exit_file(self) -> Path:
        return self.path / EXIT

    @property
    def verify_json(self) -> Path:
        return self.path / VERIFY

    @property
    def stopping_file(self) -> Path:
        return self.path / STOPPING

    @property
    def verifying_file(self) -> Path:
        return self.path / VERIFYING

    def read_argv(self) -> dict[str, Any] | None:
        d = _read_json(self.argv_json)
        return d if isinstance(d, dict) else None

    def read_pid(self) -> PidInfo | None:
        d = _read_json(self.pid_file)
        if not isinstance(d, dict) or "pid" not in d:
            return None
        try:
            return PidInfo.from_json(d)
        except (TypeError, ValueError):
            return None

    def read_exit(self) -> ExitInfo | None:
        d = _read_json(self.exit_file)
        if not isinstance(d, dict):
            return None
        try:
            return ExitInfo.from_json(d)
        except (TypeError, ValueError):
            return None

    def read_verify(self) -> list[CheckResult] | None:
        d = _read_json(self.verify_json)
        if not isinstance(d, list):
            return None
        return [CheckResult.from_json(x) for x in d if isinstance(x, dict)]

    def write_pid(self, info: PidInfo) -> None:
        atomic_write_json(self.pid_file, info.to_json())

    def write_exit(self, info: ExitInfo) -> None:
        atomic_write_json(self.exit_file, info.to_json())

    def write_verify(self, results: list[CheckResult]) -> None:
        atomic_write_json(self.verify_json, [r.to_json() for r in results])

    def mark(self, name: str, **facts: Any) -> None:
        """Create a marker file (`stopping`, `verifying`) durably; `facts` say more (the
        deadline a stop is for)."""
        atomic_write_json(self.path / name, {"at": time.time(), **facts})

    def read_stopping(self) -> dict[str, Any] | None:
        """The `stopping` marker: when the stop was asked, and the deadline it was for, if any."""
        d = _read_json(self.stopping_file)
        return d if isinstance(d, dict) else None
