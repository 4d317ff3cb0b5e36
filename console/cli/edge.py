"""The command line's edge, shared by every command: its exit codes, the usage error (exit 2),
and the signals that end a command the way Ctrl-C does."""

from __future__ import annotations

from types import FrameType

from console.core.checks.subproc import kill_live
from console.core.text.errors import Eagle3Error

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# `run` stopped at its deadline (--until): nothing failed, the stopped phases keep their
# checkpoints and the next `run --all` resumes them (a stage's 3 means the same: stopped short).
EXIT_DEADLINE = 3


class UsageError(Eagle3Error):
    pass


class Signalled(Exception):
    """SIGTERM or SIGHUP on a command line, raised where the main thread is, like Ctrl-C's
    KeyboardInterrupt, so that the same cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_signalled(signum: int, _frame: FrameType | None) -> None:
    raise Signalled(signum)


def kill_checks() -> None:
    """The check commands still running: they are in sessions of their own, which the
    terminal's signals never reach."""
    kill_live()
