"""The edge of a stage program: whatever escapes its body becomes one line on stderr and an
exit code, never a traceback, the same in every stage the console runs.

Exit codes: 0 ok, 1 a bug (anything unexpected, its type named), 2 bad input, 3 out of space
or stopped short (what was written is kept; a rerun resumes), 4 a peer (server) died,
130 interrupted (Ctrl-C), 143 terminated (SIGTERM, `eagle3 stop`). Two stages keep codes they
documented before this edge existed, named here so that each number has one spelling per meaning:
evaluate's MISMATCH (3) and patch's REFUSED (3) and WRITE_FAILED (4).

Lines: `<stage>: error: <message>` for a failure, `<stage>: interrupted[; note]` for Ctrl-C,
`<stage>: stopped by SIGTERM[; note]` for a stop.

A stage's own errors subclass these classes (`class ReserveStop(OutOfSpace)`), so the class
decides the exit code rather than the place it was raised.

SIGTERM: `with on_sigterm() as term:` raises `Terminated` in the main thread wherever it is
(every `finally` runs, so temporary files go); `on_sigterm(action)` calls action(signum)
instead (set a stop event, finish the unit); `with term.deferred():` holds a stop that lands
during a critical write until the write is whole, then acts on it. A process forked from the
owner inherits the handler until its own initializer resets it: there the handler ends the
process quietly with os._exit(128 + signum) (or, `child="ignore"`, leaves it running), and
only the owner unwinds and cleans up.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, NoReturn, Protocol, TypeVar

OK = 0
BUG = 1
BAD_INPUT = 2
STOPPED_SHORT = 3
PEER_DEAD = 4
INTERRUPTED = 130
TERMINATED = 128 + signal.SIGTERM
# codes documented before the edge, kept for the scripts that read them
MISMATCH = 3  # evaluate: speculative output differs from plain greedy decoding (a bug; no figure reported)
REFUSED = 3  # patch: content the patcher does not know, or a backup that is not the original
WRITE_FAILED = 4  # patch: the file, its backup or its lock cannot be written


class StageError(Exception):
    """A failure whose str() is the one line an operator reads (after `<stage>: error: `)."""

    exit_code = BUG


class BadInput(StageError):
    """The arguments or an input do not fit this run: nothing was written; fix and rerun."""

    exit_code = BAD_INPUT


class StoppedShort(StageError):
    """The run stopped before the end; what was written is kept and a rerun resumes."""

    exit_code = STOPPED_SHORT


class OutOfSpace(StoppedShort):
    """The disk filled (or fell to a reserve); what was written is kept."""


class PeerDead(StageError):
    """A server or peer process stopped answering; what was written is kept."""

    exit_code = PEER_DEAD


class Terminated(BaseException):
    """SIGTERM arrived: unwind through every `finally`. A BaseException, so no library's
    `except Exception` swallows it. str() is an optional note for the stop line."""

    exit_code = TERMINATED


def _line(name: str, head: str, note: str) -> str:
    return f"{name}: {head}; {note}" if note else f"{name}: {head}"


def run_program(
    name: str,
    body: Callable[[], int],
    known: type[BaseException] | tuple[type[BaseException], ...] = (),
    *,
    stop_note: str = "",
) -> int:
    """Run a stage's body and turn what escapes it into one stderr line and an exit code.

    `known`: other exception types whose str() is an operator's line (their `exit_code`,
    else 1). `stop_note`: said after an interrupt or a stop that brings no note of its own
    (e.g. "temporary files removed")."""
    caught: tuple[type[BaseException], ...] = (StageError, *(known if isinstance(known, tuple) else (known,)))
    try:
        return body()
    except caught as e:
        print(f"{name}: error: {e}", file=sys.stderr, flush=True)
        return int(getattr(e, "exit_code", BUG))
    except KeyboardInterrupt as e:
        print(_line(name, "interrupted", str(e) or stop_note), file=sys.stderr, flush=True)
        return INTERRUPTED
    except Terminated as e:
        print(_line(name, "stopped by SIGTERM", str(e) or stop_note), file=sys.stderr, flush=True)
        return TERMINATED
    except MemoryError:
        print(f"{name}: error: out of memory", file=sys.stderr, flush=True)
        return BUG
    except Exception as e:  # noqa: BLE001 - the program's edge: one line, no traceback
        print(f"{name}: error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return BUG


class Validated(Protocol):
    def validate(self) -> None: ...


OptionsT = TypeVar("OptionsT", bound=Validated)


def run_stage(name: str, argv: Sequence[str] | None, parse: Callable[[Sequence[str] | None], OptionsT],
              work: Callable[[OptionsT], int]) -> int:
    """The stage shape's edge: the options parsed and validated inside `run_program`, so a refusal
    is exit 2 like any bad input, then the work, whose `finally` blocks a stop (SIGTERM) unwinds
    through before the exit code 143."""

    def body() -> int:
        opts = parse(argv)
        opts.validate()
        return work(opts)

    with on_sigterm():
        return run_program(name, body)


def exit_with(code: int) -> NoReturn:
    """End the program with `code`, as `sys.exit` does; a stopped one (143) at once, once its
    output is flushed: its `finally` blocks have run, and the teardown of a loaded torch
    would take seconds of the stop's grace."""
    if code == TERMINATED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _raise_terminated(signum: int) -> None:
    if signum == signal.SIGINT:  # taken over only for the pid guard: Ctrl-C stays an interrupt
        raise KeyboardInterrupt
    raise Terminated()


class SigtermGuard:
    """The installed handler's state: who owns it, and whether a stop waits on a write."""

    def __init__(self, action: Callable[[int], None], child: Literal["exit", "ignore"]) -> None:
        self.owner = os.getpid()
        self.action = action
        self.child = child
        self._deferring = 0
        self.pending: int | None = None  # the signal that arrived during a deferred section

    def handle(self, signum: int, _frame: object) -> None:
        if os.getpid() != self.owner:
            if self.child == "ignore":
                return
            os._exit(128 + signum)
        if self._deferring:
            self.pending = signum
            return
        self.action(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A stop that lands in here waits until the block is done, then acts. The block's
        last statement should be the one that counts the write (a signal handler runs
        between statements, not inside one); a stop is acted on only if the block ends
        without raising."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring and self.pending is not None:
            signum, self.pending = self.pending, None
            self.action(signum)


@contextmanager
def on_sigterm(
    action: Callable[[int], None] | None = None,
    *,
    signals: tuple[int, ...] = (signal.SIGTERM,),
    child: Literal["exit", "ignore"] = "exit",
) -> Iterator[SigtermGuard]:
    """Handle SIGTERM (and any other of `signals`) for the block: raise `Terminated` by
    default (KeyboardInterrupt for a SIGINT: a stage that forks lists it for the pid guard),
    or call action(signum). The previous handlers come back after the block.
    Outside the main thread (a test calling main() from a thread) nothing is installed:
    Python delivers signals to the main thread only."""
    guard = SigtermGuard(action or _raise_terminated, child)
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {s: signal.signal(s, guard.handle) for s in signals}
    try:
        yield guard
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def leave_stops_to_parent(sigterm: signal.Handlers = signal.SIG_DFL) -> None:
    """In a pool worker's initializer: the parent decides what a stop does. SIGTERM (default:
    die at once) and Ctrl-C (ignored: the terminal sends it to the whole group, and the
    parent that gets it too shuts the pool down) no longer run the parent's handlers."""
    signal.signal(signal.SIGTERM, sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
