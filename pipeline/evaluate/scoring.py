"""The bookkeeping of a local evaluation: each drafter's tally against the shared greedy
reference, the metric events, and where the scoring stands when a stop arrives."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.events import EventWriter

from .errors import Mismatch
from .report import summarize


@dataclass
class Progress:
    """Where the scoring is, for the line a stop prints."""

    total: int = 0
    scored: int = 0
    current: str | None = None
    so_far: str = ""
    reported: bool = False  # the report is whole on disk: a stop now loses nothing


@dataclass
class Arm:
    """One drafter scored on every prompt against the same greedy reference."""

    label: str
    proposer: object  # ChainDrafter for a top-1 setting (today's chain path), TreeDrafter otherwise
    setting: object = None  # tree.Setting; None means a chain of the given k
    accepted: list[int] = field(default_factory=list)
    tokens: int = 0
    forwards: int = 0
    lengths: dict[str, float | None] = field(default_factory=dict)

    def decode(self, target, prompt, k: int, max_new: int):
        from .speculative import speculate, speculate_tree

        if self.setting is None or self.setting.topk == 1:
            return speculate(target, self.proposer, prompt.input_ids, max_new, k)
        return speculate_tree(target, self.proposer, prompt.input_ids, max_new, self.setting)

    def score(self, target, prompt, ref, k: int, max_new: int) -> None:
        self.record(prompt, self.decode(target, prompt, k, max_new), ref)

    def record(self, prompt, got, ref) -> None:
        """Count one prompt's rounds; Mismatch when its output is not the greedy reference."""
        if got.tokens != ref.tokens:
            at = next((j for j, (a, b) in enumerate(zip(got.tokens, ref.tokens)) if a != b),
                      min(len(got.tokens), len(ref.tokens)))
            raise Mismatch(f"prompt {prompt.id} ({self.label}): speculative output differs from greedy at new token "
                           f"{at} ({got.tokens[at:at + 3]} vs {ref.tokens[at:at + 3]}); refusing to report acceptance")
        self.accepted += got.accepted
        self.tokens += len(got.tokens)
        self.forwards += got.forwards
        rounds = len(got.accepted)
        self.lengths[prompt.id] = round((sum(got.accepted) + rounds) / rounds, 3) if rounds else None

    def summary(self, k: int, prompts: int, greedy_forwards: int):

        return summarize(k, self.accepted, self.tokens, prompts, self.forwards, greedy_forwards)


def emit_metrics(events: EventWriter, s, k: int, prefix: str = "") -> None:
    events.metric(f"{prefix}acceptance_length", round(s.acceptance_length, 4), step=k)
    for i, r in enumerate(s.accept_rate, 1):
        events.metric(f"{prefix}accept_rate_{i}", round(r, 4), step=k)
    events.metric(f"{prefix}speedup_forwards", round(s.speedup_forwards, 4), step=k)
