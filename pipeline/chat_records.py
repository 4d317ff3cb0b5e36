"""Reading chat-dataset records strictly, with errors that point at file, line and field.

A merge of a million records must not die on record 900,000 with a KeyError: every
record is checked against `{"id": str, "conversations": [{"role", "content"}, ...]}`
and a bad one is reported as `file:line: field 'x': what is wrong`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipeline.chat_template import ROLES


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


def parse_record(raw: bytes | str, path: str, line: int) -> ChatRecord:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(path, line, None, f"not valid JSON ({exc}); each line must be one JSON object") from None
    if not isinstance(obj, dict):
        raise RecordError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    rid = obj.get("id")
    if not isinstance(rid, str) or not rid:
        raise RecordError(path, line, "id", f"must be a non-empty string, got {rid!r}")
    conv = obj.get("conversations")
    if not isinstance(conv, list) or not conv:
        shown = "missing" if "conversations" not in obj else repr(conv)[:60]
        raise RecordError(path, line, "conversations", f"must be a non-empty list of messages, got {shown}")
    messages: list[dict[str, str]] = []
    for i, msg in enumerate(conv):
        if not isinstance(msg, dict):
            raise RecordError(path, line, f"conversations[{i}]", f"must be an object, got {type(msg).__name__}")
        role = msg.get("role")
        if role not in ROLES:
            raise RecordError(path, line, f"conversations[{i}].role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        content = msg.get("content")
        if not isinstance(content, str):
            shown = "missing" if "content" not in msg else type(content).__name__
            raise RecordError(path, line, f"conversations[{i}].content", f"must be a string, got {shown}")
        messages.append({"role": role, "content": content})
    return ChatRecord(rid, messages, line)
