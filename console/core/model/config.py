"""Typed, validated, fully interpolated config objects. Everything downstream of the
loader (checks, runs, UI) reads these and never the raw YAML."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from console.core.text.errors import PhaseError

Severity = Literal["error", "warning"]
PhaseKind = Literal["task", "service"]


class UnknownPhase(PhaseError):
    """A phase id the config does not have: a usage error (the CLI exits 2)."""


@dataclass(frozen=True)
class CheckSpec:
    """One check entry: `kind` is the single kind key, `arg` its argument after ${var}
    interpolation (a str/int/float/bool, or a dict of those). Relative paths inside
    `arg` are NOT resolved here: checks resolve them with CheckContext.resolve()."""

    kind: str
    arg: Any
    name: str
    severity: Severity = "error"
    file: str = ""
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "arg": self.arg, "name": self.name, "severity": self.severity}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckSpec:
        return cls(kind=d["kind"], arg=d["arg"], name=d["name"], severity=d.get("severity", "error"))


NOTIFY_EVENTS = ("ended", "failed", "stalled", "blocked")  # what a `notify:` entry's `on:` may name
MAX_NOTIFY_TIMEOUT = 3600.0  # seconds: the longest a notify command may run
MAX_PARALLEL = 64  # phases `run --all` may run at once: more is a typo, not a box


@dataclass(frozen=True)
class NotifySpec:
    """One `notify:` entry: a command run (detached, time-bounded) on some phase events."""

    argv: tuple[str, ...]
    on: tuple[str, ...] = NOTIFY_EVENTS
    timeout: float = 30.0


@dataclass(frozen=True)
class Phase:
    id: str
    title: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    checks: tuple[CheckSpec, ...] = ()
    verify: tuple[CheckSpec, ...] = ()
    ready: tuple[CheckSpec, ...] = ()
    inputs: tuple[Path, ...] = ()
    outputs: tuple[Path, ...] = ()
    deletes: tuple[Path, ...] = ()  # what a destructive phase removes; shown before confirming
    kind: PhaseKind = "task"
    confirm: bool = False
    description: str = ""
    line: int | None = None
    python: str | None = None  # this phase's `python:` (absolute path or a name on PATH)
    stall_after: float | None = None  # seconds of silence that count as a stall; None: the default
    notify: tuple[NotifySpec, ...] = ()


@dataclass(frozen=True)
class Config:
    path: Path  # absolute path of the YAML file
    name: str
    vars: dict[str, str]
    state_dir: Path  # absolute
    volumes: tuple[Path, ...]
    phases: tuple[Phase, ...]
    fingerprint: str  # sha256 of the file text plus the --set overrides
    overrides: dict[str, str] = field(default_factory=dict)  # in effect: saved, then --set over them
    saved_overrides: dict[str, str] = field(default_factory=dict)  # `eagle3 set`'s, from <stem>.local.yaml
    shm_dump: Path | None = None  # optional folder the shm panel counts
    python: str | None = None  # the config's `python:`; None means the console's own
    secret_env: tuple[str, ...] = ()  # names of ${env:...} values used: redacted in records
    notify: tuple[NotifySpec, ...] = ()  # config-wide `notify:` (every phase)
    parallel: int = 1  # ready phases `eagle3 run --all` runs at once (`--parallel` wins)

    def python_for(self, phase: Phase | None) -> str | None:
        """The `python:` setting a phase's commands run under (its own, else the config's)."""
        if phase is not None and phase.python:
            return phase.python
        return self.python

    @property
    def root(self) -> Path:
        """Folder relative paths resolve against, and the phases' working directory."""
        return self.path.parent

    def resolve(self, p: str | os.PathLike[str]) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() else (self.root / q)

    def phase(self, phase_id: str) -> Phase:
        for ph in self.phases:
            if ph.id == phase_id:
                return ph
        ids = [p.id for p in self.phases]
        close = difflib.get_close_matches(phase_id, ids, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise UnknownPhase(f"{self.path}: no phase '{phase_id}'; {hint}(phases: {', '.join(ids)})")
