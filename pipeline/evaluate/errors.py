"""Failures of an evaluation, each carrying the exit code the console reads (see __main__)."""

from __future__ import annotations


class EvalError(Exception):
    """A failure whose str() is the one line an operator reads."""

    exit_code = 1


class BadInput(EvalError):
    """The arguments, prompts, drafter folder, target or server do not fit this run."""

    exit_code = 2


class Mismatch(EvalError):
    """Speculative decoding produced other tokens than plain greedy decoding: a bug in
    the drafter plumbing or the verifier, so no acceptance figure is reported."""

    exit_code = 3
