"""Token ids and the assistant-only loss mask of one conversation.

A drafter learns only what the assistant says. HF can mark those tokens only when the
chat template wraps assistant text in `{% generation %}`, which most production templates
(Llama 3, Qwen, DeepSeek) do not. So the default method needs no markers: it renders the
conversation up to each assistant turn (with the generation prompt) and up to the end of
that turn, finds the assistant's content in the text between the two, and maps those
characters to tokens through the fast tokenizer's offsets. A token is masked when it
overlaps assistant text, the rule HF applies to marked templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.chat_template import has_generation_markers

METHOD_MARKERS = "generation-markers"
METHOD_PREFIX_DIFF = "prefix-diff"
METHODS = (METHOD_MARKERS, METHOD_PREFIX_DIFF)


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    loss_mask: list[int]

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


def default_method(tokenizer: Any) -> str:
    """Markers when the template has them (its author's own notion of what to learn)."""
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    return METHOD_MARKERS if has_generation_markers(template) else METHOD_PREFIX_DIFF


def _render(tokenizer: Any, messages: Sequence[dict], generation_prompt: bool) -> str | None:
    """None when the template refuses a partial conversation (some insist on alternation)."""
    if not messages:
        return None
    try:
        return tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception:
        return None


def _strip_span(text: str, lo: int, hi: int) -> tuple[int, int]:
    while lo < hi and text[lo].isspace():
        lo += 1
    while hi > lo and text[hi - 1].isspace():
        hi -= 1
    return lo, hi


def assistant_char_spans(tokenizer: Any, messages: Sequence[dict], full: str) -> list[tuple[int, int]]:
    """Character spans of assistant content in `full`, the whole rendered conversation."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or not message["content"].strip():
            continue
        prompt = _render(tokenizer, messages[:i], generation_prompt=True)
        turn = _render(tokenizer, messages[: i + 1], generation_prompt=False)
        prompt_end = len(prompt) if prompt is not None and full.startswith(prompt) else None
        turn_end = len(turn) if turn is not None and full.startswith(turn) else None
        lo = max(cursor, prompt_end or 0)
        hi = turn_end if turn_end is not None and turn_end > lo else len(full)
        content = message["content"]
        pos = full.find(content, lo, hi)
        if pos < 0:
            content = content.strip()
            pos = full.find(content, lo, hi)
        if pos >= 0:
            spans.append((pos, pos + len(content)))
            cursor = pos + len(content)
        elif prompt_end is not None and turn_end is not None and turn_end > prompt_end:
            # The template rewrote the content (e.g. trimmed or escaped it): learn the whole
            # turn as rendered, which is what the target sees itself generate.
            span = _strip_span(full, max(prompt_end, cursor), turn_end)
            if span[1] > span[0]:
                spans.append(span)
                cursor = span[1]
    return spans


def mask_from_offsets(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """1 for every token overlapping a span; both sequences are in text order."""
    mask = [0] * len(offsets)
    k = 0
    for t, (start, end) in enumerate(offsets):
        while k < len(spans) and start >= spans[k][1]:
            k += 1
        if k == len(spans):
            break
        if end > spans[k][0] and end > start:
            mask[t] = 1
    return mask


def encode_prefix_diff(tokenizer: Any, messages: Sequence[dict]) -> Encoded:
    full = tokenizer.apply_chat_template(list(messages), tokenize=False)
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    spans = assistant_char_spans(tokenizer, messages, full)
    return Encoded(list(enc["input_ids"]), mask_from_offsets(enc["offset_mapping"], spans))


def encode_markers(tokenizer: Any, messages: Sequence[dict]) -> Encoded:
    out = tokenizer.apply_chat_template(
        list(messages), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return Encoded(list(out["input_ids"]), [int(x) for x in out["assistant_masks"]])


def encode(tokenizer: Any, messages: Sequence[dict], method: str | None = None) -> Encoded:
    """`method` None picks `default_method(tokenizer)`."""
    method = method or default_method(tokenizer)
    if method == METHOD_MARKERS:
        return encode_markers(tokenizer, messages)
    if method == METHOD_PREFIX_DIFF:
        return encode_prefix_diff(tokenizer, messages)
    raise ValueError(f"unknown mask method {method!r}; use one of {', '.join(METHODS)}")
