"""The host half of the hf backend: which chat each slot answers, and what happens when an
answer ends.

A slot takes a record and keeps it for all its turns: when an answer ends, the chat so far
(with that answer) is the next turn's prompt, and the slot already holds the keys and values
of every token the new prompt shares with what it fed (the longest common prefix), so only
the rest is prefilled. A slot whose record is done, or failed, takes the next record at
once: no slot waits for the longest answer of a batch. Records enter in input order and no
further than `window` ahead of the oldest unwritten one, so the sink's held records stay few.
New records take their slots shortest first, each in the lane it widens least (lanes.py), and
each decode step attends every lane only as wide as its own longest chat so far.
"""

from __future__ import annotations

import os
import time

from collections.abc import Callable, Iterator

from ..conversation import Chat, checked
from ..errors import Failure
from ..sink import Sink
from .decoder import Admit, Decoder
from .lanes import FreeSlots

PREFILL_TOKENS = 8192  # tokens fed in one prefill forward (padding included)


class Slots:
    """What the host knows of each slot: its chat, the tokens its cache holds, its bound."""

    def __init__(self, lanes: list[range]) -> None:
        n = lanes[-1].stop
        self.lanes = lanes
        self.chat: list[Chat | None] = [None] * n
        self.held: list[list[int]] = [[] for _ in range(n)]  # tokens whose keys and values the slot holds
        self.prompt: list[list[int]] = [[] for _ in range(n)]
        self.since: list[int] = [0] * n  # decode step at which the current answer began
        self.free = FreeSlots(lanes)

    def active(self) -> list[int]:
        return [s for s, c in enumerate(self.chat) if c is not None]

    def bounds(self, max_new: int) -> list[int]:
        """Each lane's widest chat: positions its current turn can reach."""
        return [max((len(self.prompt[s]) + max_new + 1 for s in lane if self.chat[s] is not None), default=0)
                for lane in self.lanes]

    def widths(self, step: int, ahead: int, max_new: int) -> list[int]:
        """Each lane's attention width for the next `ahead` decode steps."""
        return [max((len(self.prompt[s]) + min(step - self.since[s] + ahead, max_new) + 1
                     for s in lane if self.chat[s] is not None), default=1) for lane in self.lanes]


def _groups(admits: list[Admit], budget: int) -> Iterator[list[Admit]]:
    """Prefill groups of similar new lengths, each under `budget` tokens with its padding."""
    admits = sorted(admits, key=lambda a: len(a.tokens) - a.start)
    group: list[Admit] = []
    for a in admits:
        longest = len(a.tokens) - a.start
        if group and longest * (len(group) + 1) > budget:
            yield group
            group = []
        group.append(a)
    if group:
        yield group


class Scheduler:
    def __init__(self, decoder: Decoder, prompt_ids: Callable[[list[dict[str, str]]], list[int]],
                 decode: Callable[[list[int]], str], seed_of: Callable[[Chat], int], sink: Sink,
                 sync_every: int, window: int) -> None:
        self.dec, self.prompt_ids, self.decode, self.seed_of = decoder, prompt_ids, decode, seed_of
        self.sink, self.sync_every, self.window = sink, sync_every, window
        self.slots = Slots(decoder.lanes)
        self.step = 0

    def run(self, chats: Iterator[Chat]) -> None:
        due: list[int] = []
        waiting: Chat | None = None
        exhausted = False
        while True:
            new: list[Chat] = []
            while len(new) < len(self.slots.free) and not exhausted:
                waiting = waiting or next(chats, None)
                if waiting is None:
                    exhausted = True
                elif waiting.index < self.sink.next + self.window:
                    new.append(waiting)
                    waiting = None
                else:
                    break
            self._admit(due, new)
            due = []
            if not self.slots.active():
                if exhausted and waiting is None:
                    return
                continue
            self.dec.steps(self.sync_every, self.slots.widths(self.step, self.sync_every, self.dec.max_new))
            self.step += self.sync_every
            due = self._collect()

    def _admit(self, due: list[int], new: list[Chat]) -> None:
        """Feed the next turn of the chats in `due` slots, and the first of the `new` chats."""
        admits = []
        for slot in due:
            try:
                tokens = self.prompt_ids(self.slots.chat[slot].prompt())
            except Failure as f:
                self._fail(slot, f)
                continue
            admits.append(self._turn(slot, tokens))
        fresh = []
        for chat in new:
            try:
                fresh.append((self.prompt_ids(chat.prompt()), chat))
            except Failure as f:
                self.sink.put(chat.index, (chat, f))
        bounds = self.slots.bounds(self.dec.max_new)
        for tokens, chat in sorted(fresh, key=lambda tc: len(tc[0])):
            slot = self.slots.free.take(len(tokens) + self.dec.max_new + 1, bounds)
            self.slots.chat[slot], self.slots.held[slot] = chat, []
            admits.append(self._turn(slot, tokens))
        t0 = time.perf_counter()
        for group in _groups(admits, PREFILL_TOKENS):
            self.dec.prefill(group)
        self.dec.stats.prefill_s += time.perf_counter() - t0

    def _turn(self, slot: int, tokens: list[int]) -> Admit:
        held = self.slots.held[slot]
        start = min(len(os.path.commonprefix([held, tokens])), len(tokens) - 1)
        self.dec.reserve(len(tokens) + self.dec.max_new)
        self.slots.prompt[slot], self.slots.since[slot] = tokens, self.step
        return Admit(slot, tokens, start, self.seed_of(self.slots.chat[slot]))

    def _collect(self) -> list[int]:
        """Finished answers into their chats; the slots that have a next turn to feed."""
        slots, toks, hit, in_flight = self.dec.finished()
        self.sink.generating(in_flight)
        due, idle = [], []
        for slot, answer, ended in zip(slots, toks, hit):
            chat = self.slots.chat[slot]
            self.slots.held[slot] = self.slots.prompt[slot] + answer[:-1]
            text = self.decode(answer[:-1] if ended else answer)
            try:
                chat.answer(*checked(text, len(answer)))
            except Failure as f:
                self._fail(slot, f, release=False)
                idle.append(slot)
                continue
            self.sink.answered(len(answer))
            if chat.done:
                self.slots.chat[slot] = None
                self.slots.free.give(slot)
                idle.append(slot)
                self.sink.put(chat.index, chat)
            else:
                due.append(slot)
        self.dec.release(idle)
        return due

    def _fail(self, slot: int, failure: Failure, release: bool = True) -> None:
        chat = self.slots.chat[slot]
        self.slots.chat[slot] = None
        self.slots.free.give(slot)
        if release:
            self.dec.release([slot])
        self.sink.put(chat.index, (chat, failure))
