"""Where synthesised records go: regenerate's sink (the output in input order, flushes, stats,
progress), with the decisions that need the records before them taken as each is committed in
input order: a first question that repeats a kept one is dropped (dedup.py), and once the
output holds --synthesize records the ones still finishing are surplus, neither written nor
counted. So the output is the first records, in index order, that every filter let through:
the same for any batch size, timing or resume.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.events import EventWriter
from pipeline.regenerate.errors import Failure
from pipeline.regenerate.output import Appender
from pipeline.regenerate.sink import OutputSink
from pipeline.regenerate.synthesis.chat import SynthChat, duplicate
from pipeline.regenerate.synthesis.dedup import Seen
from pipeline.regenerate.synthesis.stats import SynthStats


class SynthSink(OutputSink[SynthChat, SynthStats]):
    def __init__(self, out: Appender, stats: SynthStats, stats_path: Path, events: EventWriter, seen: Seen) -> None:
        super().__init__(out, stats, stats_path, events, stats.wanted)
        self.seen = seen
        self.kept = stats.resumed

    @property
    def full(self) -> bool:
        return self.kept >= self.total

    def counts(self) -> tuple[int, int]:
        return self.kept, self.total

    def _commit(self, r: SynthChat | tuple[SynthChat, Failure]) -> None:
        if self.full:
            self.stats.surplus += 1
            return
        self.done += 1
        if isinstance(r, tuple):
            self._drop(*r)
            return
        assert r.key is not None  # a record answered has its first question, which gives the key
        try:
            match = self.seen.match(r.key, r.number)
            if match is not None:
                raise duplicate(match, r.question)
            self.out.add(r.record())
        except Failure as f:
            self._drop(r, f)
            return
        self.seen.add(r.key, r.number, r.id)
        self.kept += 1
        self.tokens += r.tokens
        self.stats.kept(r)

    def _drop(self, chat: SynthChat, failure: Failure) -> None:
        self.failed += 1
        self.stats.drop(chat, failure.reason, failure.detail)
