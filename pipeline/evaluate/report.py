"""Acceptance figures from the verify rounds of many prompts.

- acceptance length: tokens committed per verify forward, accepted drafts + 1, over all
  rounds of all prompts (SGLang's `spec_accept_length` convention, except that SGLang also
  counts the prompt's first token, which no draft produced);
- accept rate at position i: of the rounds whose first i-1 drafts were accepted, the
  share whose i-th was too (EAGLE's per-position rate; comparable with training accuracy);
- accept prob at position i: the share of all rounds that accepted at least i drafts;
- speedup in target forwards: greedy forwards / speculative forwards for the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.records.evaluate_report import TargetForwards


@dataclass(frozen=True)
class Summary:
    num_steps: int
    prompts: int
    tokens: int
    rounds: int
    acceptance_length: float
    accept_rate: list[float]
    accept_prob: list[float]
    spec_forwards: int
    greedy_forwards: int

    @property
    def speedup_forwards(self) -> float:
        return self.greedy_forwards / max(1, self.spec_forwards)

    def record_fields(self) -> dict:
        """The evaluate report's `Figures` (pipeline/records/evaluate_report.py), rounded as a
        report keeps them: a setting row, the report and its baseline each take them."""
        return {
            "num_steps": self.num_steps,
            "prompts": self.prompts,
            "tokens": self.tokens,
            "verify_rounds": self.rounds,
            "acceptance_length": round(self.acceptance_length, 4),
            "accept_rate": tuple(round(x, 4) for x in self.accept_rate),
            "accept_prob": tuple(round(x, 4) for x in self.accept_prob),
            "target_forwards": TargetForwards(speculative=self.spec_forwards, greedy=self.greedy_forwards),
            "speedup_forwards": round(self.speedup_forwards, 4),
        }


def summarize(num_steps: int, accepted: list[int], tokens: int, prompts: int,
              spec_forwards: int, greedy_forwards: int) -> Summary:
    rounds = len(accepted)
    reached = [sum(1 for a in accepted if a >= i) for i in range(num_steps + 1)]
    rate = [reached[i] / reached[i - 1] if reached[i - 1] else 0.0 for i in range(1, num_steps + 1)]
    prob = [reached[i] / rounds if rounds else 0.0 for i in range(1, num_steps + 1)]
    length = (sum(accepted) + rounds) / rounds if rounds else 1.0
    return Summary(num_steps, prompts, tokens, rounds, length, rate, prob, spec_forwards, greedy_forwards)


def describe(s: Summary) -> str:
    rates = " ".join(f"{r:.2f}" for r in s.accept_rate)
    return (
        f"acceptance length {s.acceptance_length:.3f} at {s.num_steps} draft steps over {s.rounds} rounds "
        f"({s.prompts} prompts, {s.tokens} tokens); per-position accept rate {rates}; "
        f"target forwards {s.spec_forwards} vs {s.greedy_forwards} greedy: {s.speedup_forwards:.2f}x fewer"
    )
