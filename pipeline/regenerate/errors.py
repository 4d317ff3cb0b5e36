"""Failures of a regenerate run, each carrying the exit code of program_edge's convention."""

from __future__ import annotations


class RegenError(Exception):
    """A failure whose str() is the one line an operator reads."""

    exit_code = 1


class BadInput(RegenError):
    exit_code = 2


class StoppedShort(RegenError):
    """The disk filled: what was written is kept and a rerun resumes."""

    exit_code = 3


class PeerDead(RegenError):
    """A server stopped answering; what was written is kept and a rerun resumes."""

    exit_code = 4


class Terminated(RegenError):
    exit_code = 143


class Failure(Exception):
    """One answer that could not be had; `reason` is the stats key it is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail
