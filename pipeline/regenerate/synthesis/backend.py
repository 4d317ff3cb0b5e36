"""The hf backend, prompting for questions too: a chat that does not end with a user turn is
rendered up to where the next user turn's text begins (pipeline.chat.user_turn), and the token
that closes a user turn stops a generation as the end tokens do. Everything else (slots, the
slot cache a record's next turn reuses, seeded draws, the loop watch) is regenerate's own: a
record's answer prompt begins with its question prompt and the question, which its slot holds.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.chat.user_turn import question_prompt, special_ids, user_turn
from pipeline.regenerate.backends.hf import HFBackend


class SynthBackend(HFBackend):
    def __init__(self, model_dir: Path, device: str, dtype: str, max_new_tokens: int, temperature: float,
                 top_p: float, max_prompt_tokens: int | None, trim_loops: bool, system_prompts: tuple[str, ...], *,
                 seed: int = 0, slots: int = 16) -> None:
        super().__init__(model_dir, device, dtype, max_new_tokens, temperature, top_p, max_prompt_tokens, trim_loops,
                         seed=seed, slots=slots)
        self.where = f"--model {model_dir}"
        turns = [user_turn(self.tok, self.where, s or None) for s in sorted(set(system_prompts) | {""})]
        self.turn_ends = sorted({t.end_text for t in turns})  # the tokens that close a user turn, for the log
        self.eos |= {t.end_id for t in turns}
        self.controls = special_ids(self.tok)
        self.per_row_temperature = True

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        if messages and messages[-1]["role"] == "user":
            return super().prompt_ids(messages)
        return self.bounded_ids(question_prompt(self.tok, messages, self.where))
