"""Failures of reading or writing the hidden-state store, each carrying the exit code the
console reads (2: the store, its meta.json or the target does not fit the run; 1 anything
else). Every stage that opens the store (extraction, training) meets these same classes."""

from __future__ import annotations


class StoreError(Exception):
    """A failure whose str() is the one line an operator reads."""

    exit_code = 1


class BadInput(StoreError):
    """The store on disk, or the target it is asked to hold, does not fit this run."""

    exit_code = 2
