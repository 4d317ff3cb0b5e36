"""Where a user turn opens and closes in a target's own chat template, so the target can be
prompted to write the user's side itself (Magpie, arXiv 2406.08464).

Nothing here knows a template's format. The chat so far is rendered with one more user turn
holding a sentinel text, and with the generation prompt: the text before the sentinel is the
prompt that makes the target write a user turn, and the first token after it (past any
whitespace) is the one that closes a user turn: `<|im_end|>` in ChatML, `<|eot_id|>` in
Llama 3, `<｜Assistant｜>` in DeepSeek V3, where the next header is what ends the turn. A
template that does not place the sentinel verbatim exactly once, that renders a turn's opening
differently for different text, or whose user turn ends in plain text rather than one special
token, is refused: the question could not be stopped where the turn ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.program_edge import BadInput

SENTINEL = "Zq9SentinelUserText9qZ"
_PROBE = "What is 2 + 2?"


class UserTurnError(BadInput):
    """A chat template a user turn cannot be cut from; str() says which and why."""


@dataclass(frozen=True)
class UserTurn:
    """The token that closes a user turn in this template, and its text."""

    end_id: int
    end_text: str


def special_ids(tok: Any) -> frozenset[int]:
    """The tokenizer's control tokens: its named special tokens and the added tokens marked special."""
    added = getattr(tok, "added_tokens_decoder", {}) or {}
    return frozenset(tok.all_special_ids) | {i for i, t in added.items() if getattr(t, "special", False)}


def _render(tok: Any, messages: list[dict[str, str]], where: str) -> str:
    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - a template's own raise_exception, or a jinja error: the template's fault
        raise UserTurnError(f"{where}: its chat template cannot render a chat that ends with a user turn "
                            f"({type(e).__name__}: {str(e)[:200]}); synthesis needs one that can") from None
    if not isinstance(text, str):
        raise UserTurnError(f"{where}: its chat template rendered {type(text).__name__}, not text")
    return text


def _cut(text: str, where: str) -> tuple[str, str]:
    if text.count(SENTINEL) != 1:
        raise UserTurnError(f"{where}: its chat template does not write a user's text verbatim (a sentinel user "
                            f"message appears {text.count(SENTINEL)} times in the rendering, not once); a prompt "
                            "for the user's turn cannot be cut from it")
    before, after = text.split(SENTINEL)
    return before, after


def question_prompt(tok: Any, messages: list[dict[str, str]], where: str) -> str:
    """The chat so far, rendered up to where the next user turn's text begins."""
    return _cut(_render(tok, [*messages, {"role": "user", "content": SENTINEL}], where), where)[0]


def user_turn(tok: Any, where: str, system: str | None = None) -> UserTurn:
    """The token that closes a user turn, after checking that the template opens one the
    same way whatever its text (`system`: a system prompt the records may start with).
    `where` names the target in errors."""
    head = [{"role": "system", "content": system}] if system else []
    before, after = _cut(_render(tok, [*head, {"role": "user", "content": SENTINEL}], where), where)
    probe = _render(tok, [*head, {"role": "user", "content": _PROBE}], where)
    if not probe.startswith(before + _PROBE):
        raise UserTurnError(f"{where}: its chat template opens a user turn differently depending on the text in it; "
                            "the target could not write a question into the prompt it is later answered in")
    rest = after.lstrip()
    ids = tok(rest, add_special_tokens=False)["input_ids"] if rest else []
    if not ids or ids[0] not in special_ids(tok):
        shown = repr(rest[:40]) if rest else "nothing"
        raise UserTurnError(f"{where}: in its chat template a user turn is followed by {shown}, not by a special "
                            "token; synthesis stops a question at the one token that ends the turn")
    return UserTurn(end_id=int(ids[0]), end_text=tok.convert_ids_to_tokens(int(ids[0])))
