"""Failures of a training run, each carrying the exit code the console reads.

0 finished, 1 anything unexpected, 2 bad input (store incomplete or built from another
target, missing files, bad arguments), 3 stopped by SIGTERM/SIGINT after writing a
checkpoint (rerun with --resume to continue).
"""

from __future__ import annotations


class TrainError(Exception):
    """A failure whose str() is the one line an operator reads."""

    exit_code = 1


class BadInput(TrainError):
    exit_code = 2


class Stopped(TrainError):
    exit_code = 3
