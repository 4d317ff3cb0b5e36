"""The synthesis stats beside the output: how many records were wanted, asked and kept, what
each filter dropped (with examples), and what was generated.

Written atomically at the start (so a resumed run can check it uses the same options), every
few seconds while running, and at the end; `status` says which. A resumed run redoes the
records that were dropped before (the same seeds drop them again), so its counts are the
whole output's: the kept records read back plus what this run decided.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pipeline.records.synthesis_stats import KIND, SynthesisStats, write_stats
from pipeline.regenerate.synthesis.chat import SynthChat

EXAMPLES = 3  # kept per reason
KEYS = KIND.legacy_keys  # what makes a stats file this mode's own


@dataclass
class SynthStats:
    options: dict
    wanted: int  # records the output is to hold (--synthesize)
    max_asked: int  # record indexes this output may use
    records_out: int = 0  # in the output, written by this and earlier runs
    resumed: int = 0  # already in the output when this run started
    asked: int = 0  # records this run started
    surplus: int = 0  # finished after the output was full: not written, not counted
    dropped: Counter = field(default_factory=Counter)  # records dropped, by the filter or failure
    ended_early: Counter = field(default_factory=Counter)  # kept records a later question's filter ended
    examples: dict[str, list[str]] = field(default_factory=dict)
    questions: int = 0  # questions written by this run, kept or not
    question_tokens: int = 0
    generated_tokens: int = 0  # questions and answers
    answers: int = 0  # turns answered in the records kept by this run
    loops_cut: int = 0
    loop_tokens_cut: int = 0
    started: float = field(default_factory=time.time)
    seconds_before: float = 0.0
    status: Literal["running", "done", "failed", "stopped"] = "running"

    def example(self, reason: str, text: str) -> None:
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES:
            shown.append(text[:300])

    def drop(self, chat: SynthChat, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        self.example(reason, f"{chat.id}: {detail}")
        self.generated(chat)

    def kept(self, chat: SynthChat) -> None:
        self.answers += chat.answered
        self.loops_cut += chat.cut_answers
        self.loop_tokens_cut += chat.cut
        if chat.ended_by is not None:
            self.ended_early[chat.ended_by.reason] += 1
            self.example(chat.ended_by.reason, f"{chat.id} (turn {chat.answered + 1}): {chat.ended_by.detail}")
        self.generated(chat)

    def generated(self, chat: SynthChat) -> None:
        self.questions += chat.questions
        self.question_tokens += chat.question_tokens
        self.generated_tokens += chat.tokens

    def seconds(self) -> float:
        return round(self.seconds_before + time.time() - self.started, 3)

    def to_record(self) -> SynthesisStats:
        return SynthesisStats(
            status=self.status, wanted=self.wanted, max_asked=self.max_asked, records_out=self.records_out,
            resumed=self.resumed, asked=self.asked, surplus=self.surplus, dropped=dict(sorted(self.dropped.items())),
            ended_early=dict(sorted(self.ended_early.items())),
            examples={k: tuple(v) for k, v in self.examples.items()}, questions=self.questions,
            question_tokens=self.question_tokens, answer_tokens=self.generated_tokens - self.question_tokens,
            generated_tokens=self.generated_tokens, answers=self.answers, loops_cut=self.loops_cut,
            loop_tokens_cut=self.loop_tokens_cut, seconds=self.seconds(), options=self.options)

    def write(self, path: Path) -> None:
        write_stats(path, self.to_record())
