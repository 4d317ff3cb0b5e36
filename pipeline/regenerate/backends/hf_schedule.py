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

The host's work that does not wait on an answer is done while the device decodes: the next
records' first prompts are templated and tokenized ahead (`Ahead`), and the sink writes its
output, between launching the decode steps and the look that waits for them.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic

from pipeline.regenerate.backends.decoder import Admit, Decoder
from pipeline.regenerate.backends.lanes import FreeSlots
from pipeline.regenerate.conversation import Answering, C, Generated
from pipeline.regenerate.errors import Failure
from pipeline.regenerate.loops import trim
from pipeline.regenerate.sink import Sink

PREFILL_TOKENS = 8192  # tokens fed in one prefill forward (padding included)
AHEAD_PER_SLOT = 0.25  # records tokenized ahead while the device decodes, per slot (more than a look frees)


class Slots(Generic[C]):
    """What the host knows of each slot: its chat, the tokens its cache holds, its bound."""

    def __init__(self, lanes: list[range]) -> None:
        n = lanes[-1].stop
        self.lanes = lanes
        self.chat: list[C | None] = [None] * n
        self.held: list[list[int]] = [[] for _ in range(n)]  # tokens whose keys and values the slot holds
        self.prompt: list[list[int]] = [[] for _ in range(n)]
        self.since: list[int] = [0] * n  # decode step at which the current answer began
        self.free = FreeSlots(lanes)

    def active(self) -> list[int]:
        return [s for s, c in enumerate(self.chat) if c is not None]

    def busy(self, slot: int) -> C:
        """The chat in a slot the scheduler gave one."""
        chat = self.chat[slot]
        if chat is None:
            raise RuntimeError(f"slot {slot} holds no chat")
        return chat

    def bounds(self, max_new: int) -> list[int]:
        """Each lane's widest chat: positions its current turn can reach."""
        return self._lane_max(lambda s: len(self.prompt[s]) + max_new + 1)

    def widths(self, step: int, ahead: int, max_new: int) -> list[int]:
        """Each lane's attention width for the next `ahead` decode steps."""
        return self._lane_max(lambda s: len(self.prompt[s]) + min(step - self.since[s] + ahead, max_new) + 1)

    def _lane_max(self, reach: Callable[[int], int]) -> list[int]:
        """The most `reach` gives over each lane's busy slots (0 for an idle lane)."""
        return [max((reach(s) for s in lane if self.chat[s] is not None), default=0) for lane in self.lanes]


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


class Ahead(Generic[C]):
    """The next records, each with its first prompt's tokens (or why it has none), prepared
    before a slot is free for them."""

    def __init__(self, chats: Iterator[C], prompt_ids: Callable[[list[dict[str, str]]], list[int]]) -> None:
        self.chats, self.prompt_ids = chats, prompt_ids
        self.ready: deque[tuple[C, list[int] | Failure]] = deque()
        self.drained = False  # the input has no more records

    @property
    def exhausted(self) -> bool:
        return self.drained and not self.ready

    def prepare(self, n: int) -> None:
        """Tokenize records until `n` are ready or the input ends."""
        while len(self.ready) < n and not self.drained:
            chat = next(self.chats, None)
            if chat is None:
                self.drained = True
                return
            try:
                self._fits(chat)
                self.ready.append((chat, self.prompt_ids(chat.prompt())))
            except Failure as f:
                self.ready.append((chat, f))

    def _fits(self, chat: C) -> None:
        """Failure when even the shortest possible prompt of the chat's last turn is past the bounds."""
        floor = chat.last_turn_floor()
        if floor is None:
            return
        try:
            self.prompt_ids(floor)
        except Failure as f:
            turns = 1 + sum(m["role"] == "assistant" for m in floor)  # an answer before each turn but the last
            raise Failure(f.reason, f"its last turn of {turns}, even with one-character answers "
                                    f"before it: {f.detail}") from None

    def take(self, slots: int, below: int) -> list[tuple[C, list[int] | Failure]]:
        """Records in input order, as many as fill `slots` free slots (a record that failed
        takes none), each with an index below `below` (the sink's window)."""
        out: list[tuple[C, list[int] | Failure]] = []
        placed = 0
        while placed < slots:
            if not self.ready:
                self.prepare(slots - placed)
                if not self.ready:
                    break
            chat, tokens = self.ready[0]
            if chat.index >= below:
                break
            out.append(self.ready.popleft())
            placed += not isinstance(tokens, Failure)
        return out


class Scheduler(Generic[C]):
    def __init__(self, decoder: Decoder, prompt_ids: Callable[[list[dict[str, str]]], list[int]],
                 decode: Callable[[list[int]], str], seed_of: Callable[[Answering], int], sink: Sink[C],
                 sync_every: int, window: int) -> None:
        self.dec, self.prompt_ids, self.decode, self.seed_of = decoder, prompt_ids, decode, seed_of
        self.sink, self.sync_every, self.window = sink, sync_every, window
        self.slots: Slots[C] = Slots(decoder.lanes)
        self.step = 0

    def run(self, chats: Iterator[C]) -> None:
        ahead = Ahead(chats, self.prompt_ids)
        due: list[int] = []
        while True:
            self._admit(due, ahead.take(len(self.slots.free), self.sink.next + self.window))
            due = []
            if not self.slots.active():
                if ahead.exhausted:
                    return
                continue
            self.dec.steps(self.sync_every, self.slots.widths(self.step, self.sync_every, self.dec.max_new))
            self.step += self.sync_every
            ahead.prepare(int(AHEAD_PER_SLOT * self.dec.slots) + 1)  # while the device decodes
            self.sink.tick()
            due = self._collect()

    def _admit(self, due: list[int], new: list[tuple[C, list[int] | Failure]]) -> None:
        """Feed the next turn of the chats in `due` slots, and the first of the `new` chats."""
        admits = []
        for slot in due:
            try:
                tokens = self.prompt_ids(self.slots.busy(slot).prompt())
            except Failure as f:
                self._fail(slot, f)
                continue
            admits.append(self._turn(slot, tokens))
        fresh = []
        for chat, encoded in new:
            if isinstance(encoded, Failure):
                self.sink.put(chat.index, (chat, encoded))
            else:
                fresh.append((encoded, chat))
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
        chat = self.slots.busy(slot)
        return Admit(slot, tokens, start, self.seed_of(chat), chat.limit, chat.temperature)

    def _collect(self) -> list[int]:
        """Finished answers into their chats; the slots that have a next turn to feed."""
        slots, toks, hit, in_flight = self.dec.finished()
        self.sink.generating(in_flight)
        due, idle = [], []
        for slot, answer, ended in zip(slots, toks, hit):
            chat = self.slots.busy(slot)
            self.slots.held[slot] = self.slots.prompt[slot] + answer[:-1]
            kept = answer[:-1] if ended else trim(answer) if self.dec.loops is not None else answer
            cut = 0 if ended else len(answer) - len(kept)
            try:
                chat.take(Generated(kept, len(answer), ended, cut), self.decode)
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
        chat = self.slots.busy(slot)
        self.slots.chat[slot] = None
        self.slots.free.give(slot)
        if release:
            self.dec.release([slot])
        self.sink.put(chat.index, (chat, failure))
