"""Failures of a regenerate run: the stage edge's classes (pipeline/program_edge.py), which
carry the exit codes, and the one failure that is counted instead of ending the run."""

from __future__ import annotations

from pipeline.program_edge import BadInput, PeerDead, StageError, StoppedShort, Terminated

__all__ = ["BadInput", "Failure", "PeerDead", "RegenError", "StoppedShort", "Terminated"]


class RegenError(StageError):
    """A failure whose str() is the one line an operator reads."""


class Failure(Exception):
    """One answer that could not be had; `reason` is the stats key it is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail
