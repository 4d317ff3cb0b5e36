"""The one place where a failed thread worker becomes what the operator reads.

A worker's body does its work and raises; it does not catch. The screen that started it
(with `exit_on_error=False`) gets Textual's `Worker.StateChanged` in state ERROR and
shows one notice: an `Eagle3Error` already speaks to the operator and is shown as it is;
anything else is named after the worker (`check prep failed: OSError: ...`). Never a
traceback, and never a dead console."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.worker import Worker, WorkerState

from console.core.text.errors import Eagle3Error

NOTICE_TIMEOUT = 15


def failure_text(what: str, error: BaseException | None) -> str:
    """What the operator reads about a worker named `what` that raised `error`."""
    if isinstance(error, Eagle3Error):
        return str(error)
    if error is None:
        return f"{what} failed"
    return f"{what} failed: {type(error).__name__}: {error}"


class WorkerNotices:
    """Mixed into a Screen (before it: `class S(WorkerNotices, Screen)`): a worker that
    fails shows an error notice named by the worker's `name`. Workers in a group of
    `QUIET_WORKER_GROUPS` fail silently (a background re-check whose error the operator's
    own check shows)."""

    QUIET_WORKER_GROUPS: frozenset[str] = frozenset()
    notify: Callable[..., Any]  # the Screen's (or App's) own

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is not WorkerState.ERROR or worker.group in self.QUIET_WORKER_GROUPS:
            return
        self.notify(failure_text(worker.name, worker.error), severity="error", timeout=NOTICE_TIMEOUT)
