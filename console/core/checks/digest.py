"""sha256: a file's content hash equals a given digest or one a phase recorded.

Merge writes the dataset, then its stats with the dataset's sha256 in them; a kill between
the two renames could pair a new dataset with old stats, and record counts may agree by
chance. Comparing content hashes cannot:

    sha256: {path: "${dataset}", equals: "stats.dataset_sha256", values: {stats: "${stats}"}}

`equals` is 64 hex digits, or `NAME.key[.key...]` into a named value (a JSON file, as in
jsonl_records). The file is read in blocks into one buffer; hashlib releases the GIL on
each block, so the other checks' threads run meanwhile. `max_size` bounds the time: a file
larger than it fails at once, saying how long hashing it would take, instead of holding
a pre-flight for minutes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.jsonfile import _MISSING, dig
from console.core.checks.kind import Field, Kind, Outcome, short_path
from console.core.checks.values import ValueSourceError, named_values, values_budget
from pipeline.sizes import format_bytes

BLOCK = 8 * 2**20
DEFAULT_MAX_SIZE = 64 * 10**9
RATE = 400 * 10**6
"""Bytes per second assumed for the time budget: sha256 on one core of a slow disk's box."""
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            digest.update(view[:n])
    return digest.hexdigest()


def _expected(args: dict[str, Any], ctx: CheckContext, ev: dict[str, Any]) -> tuple[str | None, str | None]:
    """(digest, None) or (None, why it cannot be known)."""
    ref = str(args["equals"]).strip()
    if _HEX.match(ref):
        return ref.lower(), None
    try:
        names = named_values(args, ctx, ev)
    except ValueSourceError as e:
        return None, str(e)
    name, _, key = ref.partition(".")
    got = dig(names.get(name), key) if key else names.get(name, _MISSING)
    if got is _MISSING or got is None:
        return None, f"{ref} is missing ({ev.get('values_from', {}).get(name, name)} has no '{key}')"
    if not isinstance(got, str) or not _HEX.match(got.strip()):
        return None, f"{ref} is {str(got)[:80]!r}, not a sha256 (64 hex digits)"
    return got.strip().lower(), None


def run_sha256(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p = ctx.resolve(args["path"])
    ev: dict[str, Any] = {"path": str(p), "equals": str(args["equals"])}
    if not p.is_file():
        producer = ctx.producer_of(p)
        hint = f" (phase '{producer.id}' writes it)" if producer else ""
        return Outcome(False, f"{p} {'is a folder' if p.is_dir() else 'does not exist'}{hint}", ev)
    want, why = _expected(args, ctx, ev)
    if want is None:
        return Outcome(False, f"{p}: cannot compare its sha256: {why}", ev)
    size = p.stat().st_size
    limit = int(args["max_size"] or DEFAULT_MAX_SIZE)
    ev.update(bytes=size, max_size=limit, expected=want)
    if size > limit:
        return Outcome(False, f"{p} is {format_bytes(size)}, over this check's max_size {format_bytes(limit)} "
                              f"(hashing takes about {size / RATE:.0f} s); raise max_size to check it", ev)
    got = file_sha256(p)
    ev["sha256"] = got
    if got != want:
        return Outcome(False, f"{p}: sha256 {got[:12]}… but {args['equals']} is {want[:12]}…: the file is not the "
                              "one recorded (a run killed between its writes, or a file changed since); rerun "
                              "the phase that writes it", ev)
    return Outcome(True, f"{p}: sha256 {got[:12]}… matches {args['equals']}", ev)


def _cross(a: dict[str, Any]) -> str | None:
    ref = str(a["equals"]).strip()
    if _HEX.match(ref):
        return None
    name, _, key = ref.partition(".")
    defined = set(a.get("values") or {})
    if not name.isidentifier() or not key:
        return f"equals must be 64 hex digits or NAME.key into a named value, got {ref!r}"
    if name not in defined:
        have = ", ".join(sorted(defined)) or "none"
        return f"equals '{ref}' reads '{name}' but values defines {have}: add values: {{{name}: path/to/stats.json}}"
    return None


def _budget(a: dict[str, Any]) -> float:
    return 30 + int(a.get("max_size") or DEFAULT_MAX_SIZE) / RATE + values_budget(a)


KINDS = (
    Kind("sha256",
         {"path": Field("path", required=True), "equals": Field("text", required=True), "values": Field("values"),
          "max_size": Field("size")},
         run_sha256, lambda a: short_path(a["path"]), cross=_cross, budget=_budget),
)
