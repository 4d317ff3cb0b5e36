"""How a source chat becomes the prompts the target answers, turn by turn.

System and user turns are kept as written; the source's assistant turns are dropped and the
target's answer to the chat so far takes the place of each. A user turn followed by another
user turn (a `same_role: drop` leftover) is answered once, after the last of them.

Each answer's sampling seed derives from the run's seed, the record's id and the turn, never
from the batch or the order the answers were computed in: a resumed run, or one with another
batch size or concurrency, gets the same seeds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar

from pipeline.regenerate.errors import Failure

MAX_RECORD_CHARS = 1_000_000  # text in one record; longer ones are skipped as too_large


@dataclass(frozen=True)
class Generated:
    """One finished generation of the hf backend: the tokens kept (no end token; a loop cut
    after its first periods), how many were generated, whether it stopped on an end token,
    and how many tokens the loop cut removed."""

    tokens: list[int]
    generated: int
    ended: bool
    cut: int = 0


class Answering(Protocol):
    """What the hf backend asks of a record it answers, turn by turn: regenerate's `Chat` and
    synthesis's `SynthChat` (its questions are turns too)."""

    index: int
    id: str
    turn: int

    @property
    def limit(self) -> int:
        """The next generation's bound in tokens (0: --max-new-tokens)."""

    @property
    def temperature(self) -> float | None:
        """The next generation's (None: --temperature)."""

    @property
    def done(self) -> bool: ...

    def prompt(self) -> list[dict[str, str]]: ...

    def last_turn_floor(self) -> list[dict[str, str]] | None:
        """The shortest prompt the record's last turn can have, or None when it has no later turn."""

    def take(self, gen: Generated, decode: Callable[[list[int]], str]) -> None:
        """One generation into the record; Failure when it cannot be used."""


C = TypeVar("C", bound=Answering)  # the records a run answers: every one of them of one kind


@dataclass
class Chat:
    """A record being regenerated: `messages` grows as answers arrive."""

    limit: ClassVar[int] = 0  # the next generation's bound in tokens (0: --max-new-tokens)
    temperature: ClassVar[float | None] = None  # the next generation's (None: --temperature)

    index: int  # position among the records to regenerate (input order)
    id: str
    source: list[dict[str, str]]
    messages: list[dict[str, str]]
    pending: list[int]  # source positions after which an answer is due, in order
    turn: int = 0
    tokens: int = 0  # generated
    cut: int = 0  # of them, cut from the end of looping answers (loops.py)
    cut_answers: int = 0

    @classmethod
    def start(cls, index: int, rid: str, conversations: list[dict[str, str]]) -> Chat:
        due = [i for i, m in enumerate(conversations) if m["role"] == "user"
               and (i + 1 == len(conversations) or conversations[i + 1]["role"] != "user")]
        chat = cls(index, rid, conversations, [], due)
        chat._copy_until_due()
        return chat

    def _copy_until_due(self) -> None:
        stop = self.pending[self.turn] if self.turn < len(self.pending) else len(self.source) - 1
        start = (self.pending[self.turn - 1] + 1) if self.turn else 0
        for m in self.source[start: stop + 1]:
            if m["role"] != "assistant":
                self.messages.append({"role": m["role"], "content": m["content"]})

    @property
    def done(self) -> bool:
        return self.turn >= len(self.pending)

    def prompt(self) -> list[dict[str, str]]:
        return list(self.messages)

    def last_turn_floor(self) -> list[dict[str, str]] | None:
        """The prompt of this chat's last turn with each answer before it one character long:
        no answer makes it shorter (an answer has text; `checked`), so a record that cannot fit
        the target fails before any of its answers is paid for (10,000 short turns cost 276 s
        of generation before the turn that no longer fit). None for a chat of one turn."""
        if len(self.pending) < 2:
            return None
        answered = set(self.pending[:-1])
        out: list[dict[str, str]] = []
        for i, m in enumerate(self.source[: self.pending[-1] + 1]):
            if m["role"] != "assistant":
                out.append({"role": m["role"], "content": m["content"]})
            if i in answered:
                out.append({"role": "assistant", "content": "."})
        return out

    def answer(self, text: str, tokens: int, cut: int = 0) -> None:
        self.messages.append({"role": "assistant", "content": text})
        self.tokens += tokens
        self.cut += cut
        self.cut_answers += cut > 0
        self.turn += 1
        if not self.done:
            self._copy_until_due()

    def take(self, gen: Generated, decode: Callable[[list[int]], str]) -> None:
        """The hf backend's answer to the chat so far; Failure when merge could not use it."""
        self.answer(*checked(decode(gen.tokens), gen.generated), cut=gen.cut)

    def record(self) -> dict:
        return {"id": self.id, "conversations": self.messages}


def record_chars(conversations: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in conversations)


def seed_for(seed: int, rid: str, turn: int) -> int:
    digest = hashlib.sha256(f"{seed}\0{rid}\0{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def checked(text: str, tokens: int) -> tuple[str, int]:
    """An answer merge can use; an empty one is the record's failure (merge would skip it)."""
    if not text.strip():
        raise Failure("empty_answer", f"the target answered with no text ({tokens} tokens)")
    return text, tokens
