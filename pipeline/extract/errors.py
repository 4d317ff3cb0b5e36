"""Failures of an extraction run, each carrying the exit code the console reads.

The exit code is the contract (0 done, 2 bad input, 3 stopped by the disk reserve, 1 anything
else), so the exception type decides it rather than the place it was raised.
"""

from __future__ import annotations


class ExtractError(Exception):
    """A failure whose str() is the one line an operator reads."""

    exit_code = 1


class BadInput(ExtractError):
    """The arguments, dataset, target or an existing store do not fit this run."""

    exit_code = 2


class ReserveStop(ExtractError):
    """Free space fell to the reserve; what was written is kept and the run resumes later."""

    exit_code = 3
