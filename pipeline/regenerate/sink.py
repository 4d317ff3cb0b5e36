"""Where finished records go. A backend hands each record's result to a `Sink` as it finishes;
the sink commits them in input order. `OutputSink` is a run's own: the output, the stats,
the progress events, over the records it answers (`RegenerateSink` regenerate's chats,
synthesis/sink.py's `SynthSink` synthesis's). `MemorySink` keeps the results in memory, for a
bench that times a backend and a test that checks what it answered.

Answers may finish out of order (many servers, many threads); a sink holds the early ones
until those before them are done, so the output of a run, interrupted and resumed or not,
is the same file. Flushes are one write and one fsync, at most every FLUSH_S seconds.

A record of many turns, or a first batch of long answers, can take minutes before the first
record is done; progress also counts answered turns and the tokens generated so far
(`answers`, `generated`), and the first answered turn is reported at once, so a phase that
works is never silent until its first record.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

from pipeline.events import EventWriter
from pipeline.regenerate.conversation import Answering, C, Chat
from pipeline.regenerate.errors import Failure
from pipeline.regenerate.output import Appender
from pipeline.regenerate.stats import Stats

C_in = TypeVar("C_in", bound=Answering, contravariant=True)
Result = Chat | tuple[Chat, Failure]  # a chat answered, or the failure that ended it

FLUSH_S = 0.5
STATS_S = 5.0
PROGRESS_S = 1.0


class Sink(Protocol[C_in]):
    """What a backend hands its records to (backends/__init__.py)."""

    @property
    def next(self) -> int:
        """The index of the oldest record not yet committed: a backend admits a bounded window past it."""

    def put(self, index: int, result: C_in | tuple[C_in, Failure]) -> None:
        """Record `index` is finished; it is committed once every record before it is."""

    def answered(self, tokens: int) -> None:
        """One turn answered (its record may still have turns to go)."""

    def generating(self, tokens: int) -> None:
        """`tokens` generated so far by the answers not yet finished."""

    def tick(self, force: bool = False) -> None:
        """Time passes: flush and report what is due (everything, when forced)."""


class InOrder(ABC, Generic[C]):
    """Holds the results that finish early until those before them are in, then commits each
    in input order."""

    def __init__(self) -> None:
        self.next = 0
        self.held: dict[int, C | tuple[C, Failure]] = {}

    def put(self, index: int, result: C | tuple[C, Failure]) -> None:
        self.held[index] = result
        while self.next in self.held:
            r = self.held.pop(self.next)
            self.next += 1
            self._commit(r)
        self.tick()

    @abstractmethod
    def _commit(self, r: C | tuple[C, Failure]) -> None: ...

    @abstractmethod
    def tick(self, force: bool = False) -> None: ...


class MemorySink(InOrder[C]):
    """The results in input order (`results`) and the turns answered: what a bench times and a
    test checks, without an output file."""

    def __init__(self) -> None:
        super().__init__()
        self.results: list[C | tuple[C, Failure]] = []
        self.answers = 0

    def _commit(self, r: C | tuple[C, Failure]) -> None:
        self.results.append(r)

    def answered(self, tokens: int) -> None:
        self.answers += 1

    def generating(self, tokens: int) -> None:
        pass

    def tick(self, force: bool = False) -> None:
        pass


class RunStats(Protocol):
    """What a sink keeps up to date of a run's stats (regenerate's `Stats`, synthesis's `SynthStats`)."""

    resumed: int
    records_out: int
    generated_tokens: int
    status: Literal["running", "done", "failed", "stopped"]

    def write(self, path: Path) -> None: ...


S = TypeVar("S", bound=RunStats)


class OutputSink(InOrder[C], Generic[C, S]):
    """A run's sink: each record written to the output or counted as failed (`_commit`, the
    mode's own), the stats and the progress events kept up to date."""

    def __init__(self, out: Appender, stats: S, stats_path: Path, events: EventWriter, total: int) -> None:
        super().__init__()
        self.out, self.stats, self.stats_path, self.events = out, stats, stats_path, events
        self.total = total
        self.done = stats.resumed
        self.failed = 0
        self.tokens = 0
        self.answers = 0  # turns answered by this run, written or not
        self.answered_tokens = 0  # their tokens
        self.in_flight = 0  # tokens of answers still being generated
        self._t0 = time.monotonic()
        self._flushed = self._stats_at = self._progress_at = self._t0

    def answered(self, tokens: int) -> None:
        """One turn answered (its record may still have turns to go)."""
        self.answers += 1
        self.answered_tokens += tokens
        self.tick(force_progress=self.answers == 1)

    def generating(self, tokens: int) -> None:
        """`tokens` generated so far by the answers not yet finished."""
        self.in_flight = tokens
        self.tick()

    def counts(self) -> tuple[int, int]:
        """(done, total) of the progress events: records finished, of those to do."""
        return self.done, self.total

    def tick(self, force: bool = False, force_progress: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._flushed >= FLUSH_S:
            self.flush()
        if force or force_progress or now - self._progress_at >= PROGRESS_S:
            self._progress_at = now
            generated = max(self.tokens, self.answered_tokens + self.in_flight)
            rate = generated / max(now - self._t0, 1e-9)
            self.events.progress(*self.counts(), unit="records", tokens=self.stats.generated_tokens,
                                 tokens_per_s=round(rate, 1), failed=self.failed, answers=self.answers,
                                 generated=generated)
        if force or now - self._stats_at >= STATS_S:
            self._stats_at = now
            self.stats.records_out = self.stats.resumed + self.out.records
            self.stats.write(self.stats_path)

    def flush(self) -> None:
        self.out.flush()
        self._flushed = time.monotonic()


class RegenerateSink(OutputSink[Chat, Stats]):
    """Regenerate's sink: a chat answered is written, a failure counted by its reason."""

    def _commit(self, r: Result) -> None:
        """One record's result, in input order: written, or counted as failed."""
        self.done += 1
        if not isinstance(r, tuple):
            try:
                self.out.add(r.record())
            except Failure as f:
                r = (r, f)
        if isinstance(r, tuple):
            chat, failure = r
            self.failed += 1
            self.stats.fail(failure.reason, f"{chat.id}: {failure.detail}")
            self.events.message(f"record {chat.id}: {failure.reason}: {failure.detail}"[:500], level="warning")
        else:
            self.tokens += r.tokens
            self.stats.generated_tokens += r.tokens
            self.stats.loops_cut += r.cut_answers
            self.stats.loop_tokens_cut += r.cut
            self.stats.answers += r.turn


def drive(sink: OutputSink[C, S], work: Callable[[], None], verdict: Callable[[], str | None]) -> str | None:
    """Run `work`, which hands its records to `sink`, and settle the stats' status: "done", or
    "failed" with the reason `verdict` gives (returned), or "stopped" when anything escapes
    (a stop, a full disk, a bug). The last flush, stats and progress are written and the
    output and events closed whatever happens."""
    stats = sink.stats
    try:
        work()
        sink.flush()
        stats.records_out = stats.resumed + sink.out.records
        failed = verdict()
        stats.status = "failed" if failed else "done"
    except BaseException:
        stats.status = "stopped"
        raise
    finally:
        try:
            sink.tick(force=True)
        finally:
            sink.out.close()
            sink.events.close()
    return failed
