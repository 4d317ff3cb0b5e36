"""Reading chat-dataset records strictly, with errors that point at file, line and field.

A merge of a million records must not die on record 900,000 with a KeyError: every
record is checked against one of the shapes users have, and a bad one is reported as
`file:line: field 'x': what is wrong`. The accepted shapes:

- `conversations`: `{"id", "conversations": [{"role", "content"}, ...]}` (ours);
- `messages`: OpenAI-style `{"messages": [{"role", "content"}, ...]}`; a content may also be
  a list of `{"type": "text", "text"}` parts, joined; the role `developer` means `system`;
- `sharegpt`: `{"conversations": [{"from", "value"}, ...]}` with the roles human, gpt, system.

A record without an `id` gets `<source>:<line>`: stable as long as the file is, and it says
where the record came from.

Every RecordError carries a `reason` (one of REASONS), so a reader that skips bad records
(`pipeline.chat.sources`) can count them by what is wrong instead of stopping at the first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.chat.template import ROLES
from pipeline.program_edge import BadInput

SHAPE_CONVERSATIONS = "conversations"
SHAPE_MESSAGES = "messages"
SHAPE_SHAREGPT = "sharegpt"
SHAPES = (SHAPE_CONVERSATIONS, SHAPE_MESSAGES, SHAPE_SHAREGPT)

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
OPENAI_ROLES = {"developer": "system", **{r: r for r in ROLES}}
_SHOWN_KEYS = 8

NO_MESSAGES = "no_messages"
UNKNOWN_ROLE = "unknown_role"
EMPTY_VALUE = "empty_value"
NO_ASSISTANT = "no_assistant"
NOT_TEXT = "not_text"
NOT_JSON = "not_json"
BAD_ID = "bad_id"
NOT_UTF8 = "not_utf8"  # a lone surrogate (JSON "\ud800"): valid JSON, but no UTF-8 file can hold it
REASONS = (NO_MESSAGES, UNKNOWN_ROLE, EMPTY_VALUE, NO_ASSISTANT, NOT_TEXT, NOT_JSON, BAD_ID, NOT_UTF8)


class RecordError(BadInput):
    """A malformed input record; str() is the operator-facing line. A reader that skips bad
    records counts it; one that lets it escape ends its stage with exit 2."""

    def __init__(
        self, path: str, line: int, field: str | None, problem: str, reason: str = NOT_JSON, record_id: str | None = None
    ) -> None:
        self.path, self.line, self.field, self.problem = path, line, field, problem
        self.reason, self.record_id = reason, record_id
        where = f"{path}:{line}"
        super().__init__(f"{where}: field '{field}': {problem}" if field else f"{where}: {problem}")

    def __reduce__(self) -> tuple[type[RecordError], tuple[object, ...]]:
        return (RecordError, (self.path, self.line, self.field, self.problem, self.reason, self.record_id))


@dataclass(frozen=True)
class ChatRecord:
    id: str
    conversations: list[dict[str, str]]
    line: int
    shape: str = SHAPE_CONVERSATIONS


def default_id(source: str, line: int) -> str:
    return f"{source}:{line}"


def _keys(obj: dict) -> str:
    keys = [repr(k)[:40] for k in list(obj)[:_SHOWN_KEYS]]
    more = f" and {len(obj) - _SHOWN_KEYS} more" if len(obj) > _SHOWN_KEYS else ""
    return (", ".join(keys) + more) if keys else "none"


def detect_shape(obj: dict, path: str, line: int) -> tuple[str, str]:
    """(shape, key of the message list); RecordError naming the keys found when none fits."""
    if "messages" in obj and "conversations" not in obj:
        return SHAPE_MESSAGES, "messages"
    conv = obj.get("conversations")
    if isinstance(conv, list):
        first = next((m for m in conv if isinstance(m, dict)), None)
        if first is not None and "from" in first and "role" not in first:
            return SHAPE_SHAREGPT, "conversations"
        return SHAPE_CONVERSATIONS, "conversations"
    if "conversations" in obj:
        return SHAPE_CONVERSATIONS, "conversations"
    raise RecordError(
        path,
        line,
        None,
        f"unknown chat record shape (keys found: {_keys(obj)}); expected 'conversations' "
        "([{role, content}] or ShareGPT [{from, value}]) or OpenAI-style 'messages' ([{role, content}])",
        NO_MESSAGES,
    )


def _text(value: object, path: str, line: int, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts
        texts = []
        for k, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RecordError(
                    path, line, f"{field}[{k}]", f"only text parts are supported, got {kind!r}", NOT_TEXT
                )
            texts.append(part["text"])
        return "".join(texts)
    raise RecordError(
        path, line, field, f"must be a string or a list of text parts, got {type(value).__name__}", NOT_TEXT
    )


def role_table(shape: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Raw role -> our role for one shape, with `extra` (e.g. ShareGPT's bing -> assistant) on top."""
    if shape == SHAPE_SHAREGPT:
        base = dict(SHAREGPT_ROLES)
    elif shape == SHAPE_MESSAGES:
        base = dict(OPENAI_ROLES)
    else:
        base = {r: r for r in ROLES}
    return {**base, **(extra or {})}


def _message(msg: object, shape: str, roles: Mapping[str, str], path: str, line: int, field: str) -> dict[str, str]:
    if not isinstance(msg, dict):
        raise RecordError(path, line, field, f"must be an object, got {type(msg).__name__}", NOT_TEXT)
    role_key, text_key = ("from", "value") if shape == SHAPE_SHAREGPT else ("role", "content")
    role = msg.get(role_key)
    if not isinstance(role, str) or role not in roles:
        raise RecordError(
            path, line, f"{field}.{role_key}", f"must be one of {', '.join(roles)}, got {role!r}", UNKNOWN_ROLE
        )
    if text_key not in msg:
        raise RecordError(path, line, f"{field}.{text_key}", "must be a string, got missing", NOT_TEXT)
    value = msg[text_key]
    if shape == SHAPE_MESSAGES:
        value = _text(value, path, line, f"{field}.{text_key}")
    elif not isinstance(value, str):
        raise RecordError(path, line, f"{field}.{text_key}", f"must be a string, got {type(value).__name__}", NOT_TEXT)
    return {"role": roles[role], "content": value}


def record_from_obj(
    obj: object, path: str, line: int, fallback_id: str, role_map: Mapping[str, str] | None = None
) -> ChatRecord:
    """A decoded record; `fallback_id` is its id when it has none; `role_map` adds raw roles."""
    if not isinstance(obj, dict):
        raise RecordError(path, line, None, f"expected a JSON object, got {type(obj).__name__}", NOT_JSON)
    shape, key = detect_shape(obj, path, line)
    rid = obj.get("id")
    if rid is None:
        rid = fallback_id
    elif isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    if not isinstance(rid, str) or not rid:
        raise RecordError(path, line, "id", f"must be a non-empty string (or left out), got {rid!r}", BAD_ID)
    conv = obj.get(key)
    if not isinstance(conv, list) or not conv:
        shown = "missing" if key not in obj else repr(conv)[:60]
        raise RecordError(path, line, key, f"must be a non-empty list of messages, got {shown}", NO_MESSAGES, rid)
    _utf8(rid, path, line, "id", None)
    roles = role_table(shape, role_map)
    try:
        messages = [_message(msg, shape, roles, path, line, f"{key}[{i}]") for i, msg in enumerate(conv)]
        for i, msg in enumerate(messages):
            _utf8(msg["content"], path, line, f"{key}[{i}]", rid)
    except RecordError as exc:
        exc.record_id = rid
        raise
    return ChatRecord(rid, messages, line, shape)


def _utf8(text: str, path: str, line: int, field: str, rid: str | None) -> None:
    """RecordError (NOT_UTF8) when `text` holds a lone surrogate, which every writer downstream
    (merge's output, regenerate's records, a tokenizer) would fail on."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RecordError(path, line, field, f"holds a lone surrogate (U+{ord(text[e.start]):04X} at character "
                          f"{e.start}): not UTF-8 text", NOT_UTF8, rid) from None


def decode_line(raw: bytes | str, path: str, line: int) -> object:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RecordError(
            path, line, None, f"not valid JSON ({exc}); each line must be one JSON object", NOT_JSON
        ) from None


def parse_record(raw: bytes | str, path: str, line: int, source: str | None = None) -> ChatRecord:
    """`source` names the record's source in a derived id (default: the file path)."""
    return record_from_obj(decode_line(raw, path, line), path, line, default_id(source or path, line))
