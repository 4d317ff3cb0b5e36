"""Errors an operator reads. Each names where the problem is and what to do, so the
CLI and the UI can print them as one clear message instead of a traceback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class Eagle3Error(Exception):
    """Base for every error the core raises on purpose; its str() is operator-facing."""


@dataclass
class ConfigError(Eagle3Error):
    """A config problem: exit code 2 in the CLI."""

    file: Path | str
    message: str
    line: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        where = str(self.file)
        if self.line is not None:
            where += f":{self.line}"
        if self.key:
            where += f": {self.key}"
        return f"{where}: {self.message}"


class PhaseError(Eagle3Error):
    """An operation on a phase cannot go ahead (already running, unknown id, locked...)."""
