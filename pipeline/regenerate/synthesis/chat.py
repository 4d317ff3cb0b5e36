"""A record whose two sides the target writes: its question (the template up to a user turn,
sampled at --question-temperature), its answer (as regenerate answers), and with --turns N the
next question after its own answer, up to N user turns.

A first question that a filter refuses drops the record (its reason counted); a later one ends
the record after the turns it has. A first question is checked against the kept questions as
soon as it is written (dedup.py: a match with an earlier kept record is final), so a duplicate
is not answered; the sink checks it again when it commits the record in input order, against
what was kept meanwhile.

Every generation (questions and answers) draws from its own seed: the run's seed, the record's
id and the generation's number (conversation.seed_for); the system prompt a record starts with
is drawn the same way, so a record is the same whatever the batch, the order or a resume.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.regenerate.conversation import Generated, checked, seed_for
from pipeline.regenerate.errors import Failure
from pipeline.regenerate.synthesis.dedup import Key, Match, Seen
from pipeline.regenerate.synthesis.questions import judge, shown

_ID = re.compile(r"synth-(\d+)-(\d+)")


def record_id(seed: int, number: int) -> str:
    return f"synth-{seed}-{number}"


def index_of(rid: str, seed: int) -> int | None:
    """The record number an id of this run's seed names, or None."""
    m = _ID.fullmatch(rid)
    return int(m.group(2)) if m and int(m.group(1)) == seed else None


def system_for(seed: int, rid: str, prompts: tuple[str, ...]) -> str:
    """The system prompt a record starts with ('' for none)."""
    return prompts[seed_for(seed, rid, -1) % len(prompts)] if prompts else ""


@dataclass
class Questions:
    """What every record's questions are judged by: the tokenizer's control tokens, the
    filters' bounds and the questions kept so far."""

    controls: frozenset[int]
    min_chars: int
    bound: int  # --max-question-tokens
    temperature: float  # --question-temperature
    seen: Seen


def duplicate(match: Match, text: str) -> Failure:
    like = "repeats" if match.reason == "duplicate" else f"is {match.similarity:.0%} like"
    return Failure(match.reason, f"the question {like} {match.of}'s: {shown(text)}")


@dataclass
class SynthChat:
    index: int  # position among the records this run asks (the sink writes in this order)
    number: int  # the record's number, in its id: duplicates are decided in this order
    id: str
    turns: int  # user turns to write
    answer_bound: int  # --max-new-tokens
    judge: Questions
    messages: list[dict[str, str]] = field(default_factory=list)
    turn: int = 0  # generations so far, questions and answers: each draws from its own seed
    tokens: int = 0  # generated, questions and answers
    questions: int = 0  # written, kept or not
    question_tokens: int = 0
    cut: int = 0  # of the answers' tokens, cut where they looped (--trim-loops)
    cut_answers: int = 0
    answered: int = 0
    key: Key | None = None  # the first question's, for the duplicate check
    ended_by: Failure | None = None  # a later question a filter refused: the record ends before it

    @classmethod
    def start(cls, index: int, number: int, seed: int, system_prompts: tuple[str, ...], turns: int,
              answer_bound: int, judge: Questions) -> SynthChat:
        rid = record_id(seed, number)
        system = system_for(seed, rid, system_prompts)
        return cls(index, number, rid, turns, answer_bound, judge,
                   [{"role": "system", "content": system}] if system else [])

    @property
    def asking(self) -> bool:
        """Whether the next generation is a question (the chat does not end with one)."""
        return not self.messages or self.messages[-1]["role"] != "user"

    @property
    def limit(self) -> int:
        return self.judge.bound if self.asking else self.answer_bound

    @property
    def temperature(self) -> float | None:
        return self.judge.temperature if self.asking else None

    @property
    def done(self) -> bool:
        return self.ended_by is not None or self.answered >= self.turns

    @property
    def question(self) -> str:
        """The first question."""
        return next(m["content"] for m in self.messages if m["role"] == "user")

    def prompt(self) -> list[dict[str, str]]:
        return list(self.messages)

    def last_turn_floor(self) -> None:
        """None: a synthesized record's turns are not known before they are written (Chat's
        floor measures a source record before its first answer)."""
        return None

    def take(self, gen: Generated, decode: Callable[[list[int]], str]) -> None:
        """The decoder's next generation: a question or an answer. Failure drops the record."""
        asking = self.asking
        self.turn += 1
        self.tokens += gen.generated
        if not asking:
            text, _ = checked(decode(gen.tokens), gen.generated)
            self.messages.append({"role": "assistant", "content": text})
            self.cut += gen.cut
            self.cut_answers += gen.cut > 0
            self.answered += 1
            return
        self.questions += 1
        self.question_tokens += gen.generated
        text = decode(gen.tokens)
        failure = judge(gen, text, self.judge.controls, self.judge.min_chars, self.judge.bound)
        first = self.answered == 0
        if failure is None and first:
            self.key = self.judge.seen.key(text.strip())
            match = self.judge.seen.match(self.key, self.number)
            failure = duplicate(match, text.strip()) if match else None
        if failure is None:
            self.messages.append({"role": "user", "content": text.strip()})
        elif first:
            raise failure
        else:
            self.ended_by = failure

    def record(self) -> dict:
        return {"id": self.id, "conversations": self.messages}
