"""Failures of an extraction run, each carrying the exit code the console reads.

The exit code is the contract (0 done, 2 bad input, 3 stopped by the disk reserve or a full
disk, 1 anything else), so the exception type decides it rather than the place it was raised.
A write that fails with ENOSPC or EDQUOT anywhere becomes a ReserveStop (reserve.disk_full).
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


class Stopped(ExtractError):
    """SIGTERM (eagle3 stop): what is in the manifest is kept, the batch in flight is not."""

    exit_code = 143
