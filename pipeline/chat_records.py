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
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipeline.chat_template import ROLES

SHAPE_CONVERSATIONS = "conversations"
SHAPE_MESSAGES = "messages"
SHAPE_SHAREGPT = "sharegpt"
SHAPES = (SHAPE_CONVERSATIONS, SHAPE_MESSAGES, SHAPE_SHAREGPT)

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
OPENAI_ROLES = {"developer": "system", **{r: r for r in ROLES}}
_SHOWN_KEYS = 8


class RecordError(Exception):
    """A malformed input record; str() is the operator-facing line."""

    def __init__(self, path: str, line: int, field: str | None, problem: str) -> None:
        self.path, self.line, self.field, self.problem = path, line, field, problem
        where = f"{path}:{line}"
        super().__init__(f"{where}: field '{field}': {problem}" if field else f"{where}: {problem}")

    def __reduce__(self):
        return (RecordError, (self.path, self.line, self.field, self.problem))


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
    )


def _text(value: object, path: str, line: int, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts
        texts = []
        for k, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RecordError(path, line, f"{field}[{k}]", f"only text parts are supported, got {kind!r}")
            texts.append(part["text"])
        return "".join(texts)
    raise RecordError(path, line, field, f"must be a string or a list of text parts, got {type(value).__name__}")


def _message(msg: object, shape: str, path: str, line: int, field: str) -> dict[str, str]:
    if not isinstance(msg, dict):
        raise RecordError(path, line, field, f"must be an object, got {type(msg).__name__}")
    if shape == SHAPE_SHAREGPT:
        role_key, text_key, roles = "from", "value", SHAREGPT_ROLES
    else:
        role_key, text_key = "role", "content"
        roles = OPENAI_ROLES if shape == SHAPE_MESSAGES else {r: r for r in ROLES}
    role = msg.get(role_key)
    if role not in roles:
        raise RecordError(path, line, f"{field}.{role_key}", f"must be one of {', '.join(roles)}, got {role!r}")
    if text_key not in msg:
        raise RecordError(path, line, f"{field}.{text_key}", "must be a string, got missing")
    value = msg[text_key]
    if shape == SHAPE_MESSAGES:
        value = _text(value, path, line, f"{field}.{text_key}")
    elif not isinstance(value, str):
        raise RecordError(path, line, f"{field}.{text_key}", f"must be a string, got {type(value).__name__}")
    return {"role": roles[role], "content": value}


def parse_record(raw: bytes | str, path: str, line: int, source: str | None = None) -> ChatRecord:
    """`source` names the record's source in a derived id (default: the file path)."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RecordError(path, line, None, f"not valid JSON ({exc}); each line must be one JSON object") from None
    if not isinstance(obj, dict):
        raise RecordError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    shape, key = detect_shape(obj, path, line)
    rid = obj.get("id")
    if rid is None:
        rid = default_id(source or path, line)
    elif isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    if not isinstance(rid, str) or not rid:
        raise RecordError(path, line, "id", f"must be a non-empty string (or left out), got {rid!r}")
    conv = obj.get(key)
    if not isinstance(conv, list) or not conv:
        shown = "missing" if key not in obj else repr(conv)[:60]
        raise RecordError(path, line, key, f"must be a non-empty list of messages, got {shown}")
    messages = [_message(msg, shape, path, line, f"{key}[{i}]") for i, msg in enumerate(conv)]
    return ChatRecord(rid, messages, line, shape)
