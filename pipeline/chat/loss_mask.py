"""Token ids and the assistant-only loss mask of one conversation.

A drafter learns only what the assistant says. HF can mark those tokens only when the
chat template wraps assistant text in `{% generation %}`, which most production templates
(Llama 3, Qwen, DeepSeek) do not. So the default method needs no markers: it renders the
conversation up to each assistant turn (with the generation prompt) and up to the end of
that turn, finds the assistant's content in the text between the two, and maps those
characters to tokens through the fast tokenizer's offsets. A token is masked when it
overlaps assistant text, the rule HF applies to marked templates.

Two rules hold under both methods:
- The special token that ends an assistant turn (`<|eot_id|>`, `<|im_end|>`, DeepSeek's
  end of sentence, GLM's next `<|user|>`) is learnt too, as SpecForge's masks do: the target
  emits it, so the drafter must learn to end a turn. It is the first special token after the
  content, with only whitespace between; a later turn's header is never learnt.
- A special token's literal text inside a message (`<|end|>` written by a user or in an
  answer) is text: such a message's content is tokenized as text (split special tokens),
  never into the control tokens the template writes. Only records holding such text take
  this piecewise path (cut at the content's edges, where templates put a newline or a
  special token anyway); every other record is tokenized in one call, exactly as the
  target's server would.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.chat.template import has_generation_markers

METHOD_MARKERS = "generation-markers"
METHOD_PREFIX_DIFF = "prefix-diff"
METHODS = (METHOD_MARKERS, METHOD_PREFIX_DIFF)

# Private-use characters around special-token text in messages, so it can be found in the
# rendered conversation after the template has placed it (transformers 5's
# `sanitize_control_tokens` marks the same way, but cannot return offsets or masks).
_OPEN, _CLOSE = "\ue000", "\ue001"


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    loss_mask: list[int]

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class _Specials:
    ids: frozenset[int]
    pattern: re.Pattern | None  # any special token's text


_specials_cache: weakref.WeakKeyDictionary[Any, _Specials] = weakref.WeakKeyDictionary()


def _specials(tokenizer: Any) -> _Specials:
    try:
        return _specials_cache[tokenizer]
    except (KeyError, TypeError):
        pass
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    ids = {int(i) for i, tok in decoder.items() if getattr(tok, "special", False)}
    ids |= set(getattr(tokenizer, "all_special_ids", []) or [])
    texts = {str(tok) for i, tok in decoder.items() if int(i) in ids}
    texts |= {t for t in getattr(tokenizer, "all_special_tokens", []) or [] if t}
    longest_first = sorted((t for t in texts if t and not t.isspace()), key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, longest_first))) if longest_first else None
    found = _Specials(frozenset(ids), pattern)
    try:
        _specials_cache[tokenizer] = found
    except TypeError:
        pass
    return found


def special_token_ids(tokenizer: Any) -> frozenset[int]:
    return _specials(tokenizer).ids


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
    except Exception:  # noqa: BLE001 - any template error means "cannot render this prefix"
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


def generation_char_spans(tokenizer: Any, messages: Sequence[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the spans its template marks with `{% generation %}`."""
    from transformers.utils.chat_template_utils import render_jinja_template

    out: Any = render_jinja_template(
        conversations=[list(messages)],
        chat_template=tokenizer.chat_template,
        return_assistant_tokens_mask=True,
        **tokenizer.special_tokens_map,
    )
    rendered, indices = out  # the texts and, asked for, each one's generation spans
    return rendered[0], [(int(a), int(b)) for a, b in indices[0] if b > a]


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


def mask_end_of_turn(
    ids: Sequence[int], offsets: Sequence[tuple[int, int]], text: str, mask: list[int], special_ids: frozenset[int]
) -> None:
    """After each masked run, also mask the special token that closes it (whitespace between
    included), unless the run already ends with a special token (a generation block that
    holds its end-of-turn token)."""
    n = len(ids)
    for t in range(n - 1):
        if not mask[t] or mask[t + 1] or ids[t] in special_ids:
            continue
        j = t + 1
        while j < n and ids[j] not in special_ids and text[offsets[j][0] : offsets[j][1]].isspace():
            j += 1
        if j < n and ids[j] in special_ids:
            mask[t + 1 : j + 1] = [1] * (j - t)


def _mark(messages: Sequence[dict], pattern: re.Pattern) -> list[dict]:
    """Wrap every content that holds special-token text in markers (inside its outer
    whitespace, so a template that trims still trims): it is tokenized as text, whole."""

    def mark(text: str) -> str:
        text = text.replace(_OPEN, "").replace(_CLOSE, "")
        if not pattern.search(text):
            return text
        core = text.strip()
        lead = text[: len(text) - len(text.lstrip())]
        return lead + _OPEN + core + _CLOSE + text[len(lead) + len(core) :]

    return [{**m, "content": mark(m["content"])} for m in messages]


def _unmark(marked: str, spans: list[tuple[int, int]]) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """The text without markers, the spans moved with it, and the marked (literal) ranges."""
    new_pos = [0] * (len(marked) + 1)
    out: list[str] = []
    literals: list[tuple[int, int]] = []
    n = 0
    opened = -1
    for i, ch in enumerate(marked):
        new_pos[i] = n
        if ch == _OPEN:
            opened = n
        elif ch == _CLOSE:
            if opened >= 0 and n > opened:
                literals.append((opened, n))
            opened = -1
        else:
            out.append(ch)
            n += 1
    new_pos[len(marked)] = n
    return "".join(out), [(new_pos[a], new_pos[b]) for a, b in spans], literals


def _encode_piece(tokenizer: Any, text: str, as_text: bool, first: bool) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids and offsets of one piece; after the first piece a newline is put in front and taken
    off again, so SentencePiece adds no start-of-text space (the trick transformers uses)."""
    lead = "" if first else "\n"
    enc = tokenizer(
        lead + text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=as_text
    )
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    if lead:
        k = 0
        while k < len(ids) and offsets[k][1] <= len(lead):
            k += 1
        if k < len(ids) and offsets[k][0] < len(lead):  # the newline merged into a token: go without it
            return _encode_piece(tokenizer, text, as_text, first=True)
        ids, offsets = ids[k:], offsets[k:]
    shift = len(lead)
    return ids, [(max(a - shift, 0), max(b - shift, 0)) for a, b in offsets]


def tokenize(tokenizer: Any, text: str, literals: Sequence[tuple[int, int]] = ()) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids and character offsets of `text`; the `literals` ranges are tokenized as plain text."""
    if not literals:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    pieces: list[tuple[int, int, bool]] = []
    pos = 0
    for a, b in literals:
        if a > pos:
            pieces.append((pos, a, False))
        pieces.append((a, b, True))
        pos = b
    if pos < len(text):
        pieces.append((pos, len(text), False))
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    for k, (a, b, as_text) in enumerate(pieces):
        piece_ids, piece_offsets = _encode_piece(tokenizer, text[a:b], as_text, first=k == 0)
        ids += piece_ids
        offsets += [(a + s, a + e) for s, e in piece_offsets]
    return ids, offsets


def _encode(tokenizer: Any, messages: Sequence[dict], method: str) -> Encoded:
    specials = _specials(tokenizer)
    pattern = specials.pattern
    marked = pattern is not None and any(pattern.search(m["content"]) for m in messages)
    msgs = _mark(messages, pattern) if pattern is not None and marked else list(messages)
    if method == METHOD_MARKERS:
        full, spans = generation_char_spans(tokenizer, msgs)
    else:
        full = tokenizer.apply_chat_template(msgs, tokenize=False)
        spans = assistant_char_spans(tokenizer, msgs, full)
    literals: list[tuple[int, int]] = []
    if marked:
        full, spans, literals = _unmark(full, spans)
    ids, offsets = tokenize(tokenizer, full, literals)
    mask = mask_from_offsets(offsets, spans)
    mask_end_of_turn(ids, offsets, full, mask, specials.ids)
    return Encoded(ids, mask)


def encode_prefix_diff(tokenizer: Any, messages: Sequence[dict]) -> Encoded:
    return _encode(tokenizer, messages, METHOD_PREFIX_DIFF)


def encode_markers(tokenizer: Any, messages: Sequence[dict]) -> Encoded:
    return _encode(tokenizer, messages, METHOD_MARKERS)


def encode(tokenizer: Any, messages: Sequence[dict], method: str | None = None) -> Encoded:
    """`method` None picks `default_method(tokenizer)`."""
    method = method or default_method(tokenizer)
    if method not in METHODS:
        raise ValueError(f"unknown mask method {method!r}; use one of {', '.join(METHODS)}")
    return _encode(tokenizer, messages, method)
