"""Failures of an evaluation, each carrying the exit code the console reads (see __main__).
Refusals are the stage edge's BadInput (exit 2)."""

from __future__ import annotations

from pipeline.program_edge import MISMATCH, BadInput, StageError

__all__ = ["BadInput", "EvalError", "Mismatch"]


class EvalError(StageError):
    """A failure whose str() is the one line an operator reads."""


class Mismatch(EvalError):
    """Speculative decoding produced other tokens than plain greedy decoding: a bug in
    the drafter plumbing or the verifier, so no acceptance figure is reported."""

    exit_code = MISMATCH
