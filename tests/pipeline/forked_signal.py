"""A forked worker signalled before its initializer has run: the window in which it still
carries its parent's signal handler (merge's tokenizer pool, the trainer's DataLoader)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable


def _terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)  # wait-ok: a handler that does not end the process lets it return here


def exit_code_of_forked_child_signalled_under(handler: Callable) -> int | None:
    """Install `handler` for SIGTERM, fork a child that sends itself SIGTERM at once (before
    any initializer of its own could reset the handler), and return the child's exit code."""
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        child = multiprocessing.get_context("fork").Process(target=_terminate_self)
        child.start()
        child.join(timeout=60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return child.exitcode
