"""The stage edge: what escapes a stage becomes one line and the exit code the console reads,
and SIGTERM does what the stage asked for, in the process that owns the handler only."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest
from forked_signal import exit_code_of_forked_child_signalled_under

from pipeline.program_edge import (
    BadInput,
    OutOfSpace,
    PeerDead,
    StageError,
    StoppedShort,
    Terminated,
    leave_stops_to_parent,
    on_sigterm,
    run_program,
)


class ReserveStop(OutOfSpace):
    """A stage's own error, subclassing the edge's."""


class Foreign(Exception):
    exit_code = 2


def _raises(exc: BaseException):
    def body() -> int:
        raise exc

    return body


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (BadInput("x.jsonl:3: field 'id' is missing"), 2, "demo: error: x.jsonl:3: field 'id' is missing"),
        (StoppedShort("stopped at step 3/9"), 3, "demo: error: stopped at step 3/9"),
        (ReserveStop("free space fell to the reserve"), 3, "demo: error: free space fell to the reserve"),
        (PeerDead("http://h:1 stopped answering"), 4, "demo: error: http://h:1 stopped answering"),
        (StageError("the store is corrupt"), 1, "demo: error: the store is corrupt"),
        (KeyboardInterrupt(), 130, "demo: interrupted"),
        (Terminated(), 143, "demo: stopped by SIGTERM"),
        (Terminated("kept 3 records"), 143, "demo: stopped by SIGTERM; kept 3 records"),
        (ValueError("bad"), 1, "demo: error: ValueError: bad"),
        (MemoryError(), 1, "demo: error: out of memory"),
    ],
)
def test_what_escapes_a_stage_is_one_line_and_its_exit_code(capsys, exc, code, line):
    assert run_program("demo", _raises(exc)) == code
    out = capsys.readouterr()
    assert out.err == line + "\n"
    assert out.out == ""


def test_known_foreign_errors_keep_their_exit_code_and_a_plain_line(capsys):
    assert run_program("merge", _raises(Foreign("src.jsonl: 9% unusable")), Foreign) == 2
    assert capsys.readouterr().err == "merge: error: src.jsonl: 9% unusable\n"


def test_a_stop_note_follows_an_interrupt_or_a_stop_without_one(capsys):
    assert run_program("merge", _raises(KeyboardInterrupt()), stop_note="temporary files removed") == 130
    assert capsys.readouterr().err == "merge: interrupted; temporary files removed\n"
    assert run_program("merge", _raises(Terminated()), stop_note="temporary files removed") == 143
    assert capsys.readouterr().err == "merge: stopped by SIGTERM; temporary files removed\n"
    assert run_program("train", _raises(KeyboardInterrupt("checkpoint step_3 kept")), stop_note="x") == 130
    assert capsys.readouterr().err == "train: interrupted; checkpoint step_3 kept\n"


def test_a_body_that_returns_gives_its_code(capsys):
    assert run_program("demo", lambda: 0) == 0
    assert capsys.readouterr().err == ""


def test_sigterm_raises_terminated_in_the_block_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_with_an_action_calls_it_and_goes_on():
    stop = threading.Event()
    with on_sigterm(lambda signum: stop.set()):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(10)


def test_an_action_can_take_ctrl_c_too():
    got: list[int] = []
    with on_sigterm(got.append, signals=(signal.SIGTERM, signal.SIGINT)):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            if len(got) == 2:
                break
    assert got == [signal.SIGINT, signal.SIGTERM]


def test_ctrl_c_taken_over_for_the_pid_guard_stays_an_interrupt():
    with pytest.raises(KeyboardInterrupt), on_sigterm(signals=(signal.SIGTERM, signal.SIGINT)):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass


def _interrupt_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)  # wait-ok: a handler that does not end the process lets it return here


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_child_interrupted_before_its_initializer_ends_quietly_with_130(capfd):
    """Ctrl-C reaches the whole process group: a pool worker forked a moment ago must not
    print a KeyboardInterrupt traceback of its own."""
    with on_sigterm(signals=(signal.SIGTERM, signal.SIGINT)):
        child = multiprocessing.get_context("fork").Process(target=_interrupt_self)
        child.start()
        child.join(timeout=60)
    assert child.exitcode == 130
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_a_stop_during_a_deferred_write_waits_until_it_is_whole():
    written: list[str] = []
    with pytest.raises(Terminated), on_sigterm() as term:
        with term.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            written.append("report")  # the signal has been handled by now, and held
        written.append("after")  # not reached: the stop acts as the block ends
    assert written == ["report"]


def test_a_deferred_block_that_raises_does_not_also_stop():
    with on_sigterm() as term:
        with pytest.raises(OSError), term.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            raise OSError("disk full")
        assert term.pending == signal.SIGTERM


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_child_signalled_before_its_initializer_ends_quietly_with_143(capfd):
    with on_sigterm() as term:
        assert exit_code_of_forked_child_signalled_under(term.handle) == 143
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Terminated" not in err


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_child_can_be_left_running_and_the_owners_action_is_not_called():
    stop = threading.Event()
    with on_sigterm(lambda signum: stop.set(), child="ignore") as term:
        assert exit_code_of_forked_child_signalled_under(term.handle) == 0
    assert not stop.is_set()


def test_nothing_is_installed_outside_the_main_thread():
    seen = {}

    def in_thread() -> None:
        with on_sigterm():
            seen["handler"] = signal.getsignal(signal.SIGTERM)

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(30)
    assert seen["handler"] is signal.getsignal(signal.SIGTERM)


def test_a_pool_worker_leaves_stops_to_its_parent():
    term, intr = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        leave_stops_to_parent()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, term)
        signal.signal(signal.SIGINT, intr)
