"""Failures of a training run, each carrying the exit code the console reads.

0 finished, 1 anything unexpected, 2 bad input (store incomplete or built from another
target, missing files, bad arguments: the stage edge's BadInput), 3 stopped by SIGTERM after
writing a checkpoint (rerun with --resume to continue), 130 the same after Ctrl-C.
"""

from __future__ import annotations

from pipeline.program_edge import BadInput, StageError, StoppedShort

__all__ = ["BadInput", "Stopped", "TrainError"]


class TrainError(StageError):
    """A failure whose str() is the one line an operator reads."""


class Stopped(StoppedShort):
    """A stop asked for (SIGTERM, Ctrl-C) came: the run checkpointed and ended."""
