"""The SGLang dump folder's protocol, the one definition both sides read: the server's hook
(pipeline/patch/sglang_dump.py, inside the SGLang process) writes by it and the client
(pipeline/extract/dumps.py) reads by it.

Were the names or the room rules written twice, a change on one side would leave the
other waiting for files that never come, or overshooting a budget the other keeps.
Stdlib only, so importing it inside the server costs nothing.

- A request of ours has the rid `request_key(index, input_ids)`:
  `e3-<index>-<first 16 hex of sha256(input ids as little-endian int64)>`, computed from
  the request alone, so a resumed client finds a dump a killed run left behind. The server
  looks only at rids that start with KEY_PREFIX.
- Per request the folder gets `<KEY>.safetensors` (the dump, written to a temp name and
  renamed) or `<KEY>.error` (one line of reason, at most ERROR_LINE_CHARS characters).
- Writers serialise their budget check and write under an flock on LOCK_NAME.
- Room: dumps may fill the budget less ERROR_ROOM (`dump_room`), so an .error can always
  be written. A dump's size before it exists is bounded by `dump_size_bound`, which allows
  HEADER_ALLOWANCE bytes for its safetensors header; a header longer than that is refused.
"""

from __future__ import annotations

import hashlib
import struct

KEY_PREFIX = "e3-"
DUMP_SUFFIX = ".safetensors"
ERROR_SUFFIX = ".error"
LOCK_NAME = ".eagle3-dump.lock"
ERROR_ROOM = 4096
"""Bytes of the budget that dumps leave free for .error files, so a refusal can be written
without taking the folder over its budget; also the most of an .error file the client reads."""
ERROR_LINE_CHARS = 1000
"""The longest reason the server writes into an .error file."""
HEADER_ALLOWANCE = 1024
"""Bytes allowed for a dump's safetensors header when sizing it before it exists (the real
header of three tensors plus metadata is about 300 bytes), and the most a dump's header may
take: a longer one is refused before it is read."""


def request_key(index: int, input_ids: list[int]) -> str:
    digest = hashlib.sha256(struct.pack(f"<{len(input_ids)}q", *input_ids)).hexdigest()
    return f"{KEY_PREFIX}{index}-{digest[:16]}"


def is_ours(rid: object) -> bool:
    """A request id the client made (the server dumps only those)."""
    return isinstance(rid, str) and rid.startswith(KEY_PREFIX)


def key_index(key: str) -> int | None:
    """The sample index a key names, or None for a name that is not a key."""
    parts = key.split("-")
    if len(parts) != 3 or parts[0] + "-" != KEY_PREFIX or not parts[1].isdigit() or len(parts[2]) != 16:
        return None
    return int(parts[1])


def dump_name(key: str) -> str:
    return f"{key}{DUMP_SUFFIX}"


def error_name(key: str) -> str:
    return f"{key}{ERROR_SUFFIX}"


def dump_room(budget: int) -> int:
    """What the dumps together may take of a folder budget of `budget` bytes."""
    return max(0, budget - ERROR_ROOM)


def dump_size_bound(tokens: int, hidden: int, dtype_bytes: int = 2) -> int:
    """Upper bound of one dump file's size: input_ids, hidden_state and aux_hidden_state."""
    return HEADER_ALLOWANCE + tokens * (8 + 4 * hidden * dtype_bytes)
