"""Named pure functions run torch.compile'd, with a way back to eager.

A training step's elementwise passes (the loss's over vocabulary-wide rows, the TTT
attention's merge) are each one kernel compiled and a chain of fp32 copies written out. They
are pure functions of tensors called inside custom autograd Functions, so nothing of autograd
runs through the compiled code and a failure shows where it is called: the first one (no
Triton, an unsupported op, a shape that does not compile) turns every function of the table
back to eager with one warning line, rather than the run failing. Shapes are compiled dynamic:
every batch has its own row count and length, which would otherwise each cost a recompile.
`compile_failed` is the one wording of that warning, for every compiled thing that falls back
(these tables, extraction's decoder layers, training's drafter layer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pipeline.events import warn


def compile_failed(what: str, e: Exception, flag: str) -> str:
    """The warning of a torch.compile that failed and whose code goes on eagerly (`warn` says it)."""
    first = str(e).splitlines()[0][:200] if str(e) else ""
    return (f"torch.compile of {what} failed ({type(e).__name__}: {first}); continuing uncompiled "
            f"({flag} skips the attempt)")


class CompiledOps:
    """`table`'s functions, compiled or eager; `what` and `flag` name them in the warning."""

    def __init__(self, table: dict[str, Callable], compile: bool, what: str, flag: str,
                 log: Callable[[str], None] = print, stage: str = "train") -> None:
        self.table = table
        self.what, self.flag, self.stage, self.log = what, flag, stage, log
        self._compiled = {name: torch.compile(fn, dynamic=True) for name, fn in table.items()} if compile else None

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    def call(self, name: str, *args: Any) -> Any:
        if self._compiled is not None:
            try:
                return self._compiled[name](*args)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - any compile failure falls back to the same math, eagerly
                self._compiled = None
                warn(self.stage, compile_failed(self.what, e, self.flag), log=self.log)
        return self.table[name](*args)
