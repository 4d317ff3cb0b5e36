"""The bookkeeping of a local evaluation: each drafter's tally against the shared greedy
reference, the metric events, and where the scoring stands when a stop arrives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.evaluate.errors import Mismatch
from pipeline.evaluate.report import Summary, summarize
from pipeline.events import EventWriter

if TYPE_CHECKING:
    from pipeline.evaluate.drafter import ChainDrafter
    from pipeline.evaluate.prompts import Prompt
    from pipeline.evaluate.speculative import Decoded
    from pipeline.evaluate.tree import Setting
    from pipeline.evaluate.tree_drafter import TreeDrafter
    from pipeline.evaluate.verifier import Target


@dataclass
class Progress:
    """Where the scoring is, for the line a stop prints."""

    total: int = 0
    scored: int = 0
    current: str | None = None
    so_far: str = ""
    reported: bool = False  # the report is whole on disk: a stop now loses nothing

    def stop_note(self) -> str:
        """What a stop leaves, said after `stopped by SIGTERM`: nothing is kept but the log."""
        if not self.total:
            return "before any prompt was scored; no report was written"
        dropped = f"; prompt {self.current} was dropped mid-way" if self.current else ""
        so_far = f" ({self.so_far})" if self.so_far else ""
        return (f"{self.scored} of {self.total} prompts were scored{so_far}{dropped}; nothing is kept, no report "
                "was written: rerun to score")


@dataclass
class Arm:
    """One drafter scored on every prompt against the same greedy reference."""

    label: str
    proposer: ChainDrafter | TreeDrafter  # ChainDrafter for a top-1 setting (today's chain path)
    setting: Setting
    accepted: list[int] = field(default_factory=list)
    tokens: int = 0
    forwards: int = 0
    lengths: dict[str, float | None] = field(default_factory=dict)

    def decode(self, target: Target, prompt: Prompt, k: int, max_new: int) -> Decoded:
        from pipeline.evaluate.speculative import speculate, speculate_tree
        from pipeline.evaluate.tree_drafter import TreeDrafter

        if self.setting.topk == 1:
            assert not isinstance(self.proposer, TreeDrafter)
            return speculate(target, self.proposer, prompt.input_ids, max_new, k)
        assert isinstance(self.proposer, TreeDrafter)
        return speculate_tree(target, self.proposer, prompt.input_ids, max_new, self.setting)

    def score(self, target: Target, prompt: Prompt, ref: Decoded, k: int, max_new: int) -> None:
        self.record(prompt, self.decode(target, prompt, k, max_new), ref)

    def record(self, prompt: Prompt, got: Decoded, ref: Decoded) -> None:
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

    def summary(self, k: int, prompts: int, greedy_forwards: int) -> Summary:
        return summarize(k, self.accepted, self.tokens, prompts, self.forwards, greedy_forwards)


def say(events: EventWriter, text: str) -> None:
    """A line of the log that the console also shows as a message."""
    print(f"evaluate: {text}", flush=True)
    events.message(text)


def emit_metrics(events: EventWriter, s: Summary, k: int, prefix: str = "") -> None:
    events.metric(f"{prefix}acceptance_length", round(s.acceptance_length, 4), step=k)
    for i, r in enumerate(s.accept_rate, 1):
        events.metric(f"{prefix}accept_rate_{i}", round(r, 4), step=k)
    events.metric(f"{prefix}speedup_forwards", round(s.speedup_forwards, 4), step=k)
