"""Readings land on one clock: each poller posts at the next multiple of the log's frame period
after its read (so the status, GPU, host and disk readings and the log's lines repaint the
screen once together, not each on its own), an operator's poke posts at once, and so does
the first reading after a quiet spell. The cost this saves is measured by bench/console.py."""

from __future__ import annotations

import threading
import time

from console.ui.pollers import FRAME_S, Poller, next_tick


class Owner:
    """Records when each message was posted, on the monotonic clock."""

    def __init__(self) -> None:
        self.posted: list[tuple[float, float]] = []  # (read finished, posted)
        self.read_done = 0.0
        self.event = threading.Event()

    def post_message(self, _msg: object) -> bool:
        self.posted.append((self.read_done, time.monotonic()))
        self.event.set()
        return True


def test_next_tick_is_the_first_multiple_of_the_period_at_or_after_now() -> None:
    assert next_tick(10.0, 0.5) == 10.0
    assert next_tick(10.01, 0.5) == 10.5
    assert next_tick(10.49, 0.5) == 10.5


def _poller(owner: Owner, interval: float) -> Poller:
    def read() -> object:
        owner.read_done = time.monotonic()
        return object()
    return Poller(owner, "t", interval, read)  # type: ignore[arg-type]


def test_a_reading_is_posted_on_the_frame_clock_never_before_its_tick() -> None:
    owner = Owner()
    poller = _poller(owner, 1.0)
    poller.start()
    try:
        deadline = time.monotonic() + 30
        while len(owner.posted) < 3 and time.monotonic() < deadline:
            owner.event.wait(1)
            owner.event.clear()
    finally:
        poller.stop(wait=5)
    assert len(owner.posted) >= 3
    for read_done, posted in owner.posted[1:]:  # the first (no post before it) goes at once
        assert posted >= next_tick(read_done, FRAME_S) - 1e-6  # held until the tick after its read


def test_a_poke_posts_at_once_and_a_fast_poller_keeps_its_own_pace() -> None:
    owner = Owner()
    poller = _poller(owner, 3600.0)  # only its first read and pokes
    poller.start()
    try:
        assert owner.event.wait(30) and len(owner.posted) == 1
        owner.event.clear()
        poller.period = 1e6  # a clock whose next tick is days away: only a poke's post can come
        poller.poke()
        assert owner.event.wait(30), "a poked read waited for the clock"
    finally:
        poller.stop(wait=5)
    assert _poller(Owner(), 0.05).period == 0.0  # a test's fast poller is not held to the clock
