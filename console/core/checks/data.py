"""Datasets: jsonl_records counts the records of a JSON-lines file.

Counting reads the file in big binary blocks and counts newlines (a final line without
one still counts), so a 50 GB dataset is counted at disk speed. Only the first and last
few lines are parsed: that is where a truncated write or a stray header shows up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

from console.core.checks.context import CheckContext
from console.core.checks.kind import Field, Kind, Outcome, names_check, short_path
from console.core.checks.values import ValueSourceError, named_values, values_budget
from console.core.figures.expr import ExprError, evaluate_traced

BLOCK = 16 * 2**20
EDGE_LINES = 3
EDGE_BYTES = 64 * 2**20  # a single record longer than this is not parsed


def count_lines(path: Path) -> tuple[int, int]:
    """(records, bytes): newlines, plus one for a last line that lacks its newline."""
    count = 0
    size = 0
    last = b""
    with open(path, "rb", buffering=0) as f:
        while True:
            block = f.read(BLOCK)
            if not block:
                break
            count += block.count(b"\n")
            size += len(block)
            last = block[-1:]
    if size and last != b"\n":
        count += 1
    return count, size


def _head(f: BinaryIO, n: int) -> list[bytes]:
    buf = b""
    eof = False
    while buf.count(b"\n") < n and len(buf) < EDGE_BYTES:
        block = f.read(2**20)
        if not block:
            eof = True
            break
        buf += block
    lines = buf.split(b"\n")
    last = lines.pop()  # after the last newline: nothing, or a line still going on
    if eof and last:
        lines.append(last)
    return lines[:n]


def _tail(f: BinaryIO, size: int, n: int) -> list[bytes]:
    pos = size
    buf = b""
    while pos > 0 and len(buf) < EDGE_BYTES:
        step = min(2**20, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf
        body = buf[:-1] if buf.endswith(b"\n") else buf
        if body.count(b"\n") >= n:
            break
    body = buf[:-1] if buf.endswith(b"\n") else buf
    lines = body.split(b"\n")
    if pos > 0:
        lines = lines[1:]  # the first piece may be the end of a longer line
    return lines[-n:]


def malformed_line(path: Path, count: int, size: int) -> tuple[int, str] | None:
    """(line number, why) for the first bad line among the first and last EDGE_LINES."""
    if count == 0:
        return None
    with open(path, "rb") as f:
        head = _head(f, min(EDGE_LINES, count))
        tail = _tail(f, size, min(EDGE_LINES, count)) if count > EDGE_LINES else []
    numbered: list[tuple[int, bytes]] = list(enumerate(head, start=1))
    if tail:
        first = count - len(tail) + 1
        numbered += [(i, ln) for i, ln in enumerate(tail, start=first) if i > EDGE_LINES]
    for number, raw in numbered:
        line = raw.rstrip(b"\r")
        if not line.strip():
            return number, "it is empty"
        try:
            json.loads(line)
        except UnicodeDecodeError:
            return number, "it is not UTF-8 text"
        except ValueError as e:
            return number, f"it is not valid JSON ({e})"
    return None


def run_jsonl_records(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p = ctx.resolve(args["path"])
    ev: dict[str, Any] = {"path": str(p)}
    if not p.is_file():
        if p.is_dir():
            return Outcome(False, f"{p} is a folder, not a JSON-lines file", ev)
        producer = ctx.producer_of(p)
        hint = f" (phase '{producer.id}' writes it)" if producer else ""
        return Outcome(False, f"{p} does not exist{hint}", ev)
    count, size = count_lines(p)
    ev.update(records=count, bytes=size)
    bad = malformed_line(p, count, size)
    if bad:
        ev.update(bad_line=bad[0])
        return Outcome(False, f"{p}: line {bad[0]} of {count:,} is malformed: {bad[1]}", ev)

    bounds: dict[str, float] = {}
    used: dict[str, Any] = {}
    try:
        names = named_values(args, ctx, ev)
    except ValueSourceError as e:
        return Outcome(False, f"{p}: {count:,} records, but {e}", ev)
    for key in ("min", "max", "equals"):
        raw = args.get(key)
        if raw is None:
            continue
        if isinstance(raw, str):
            try:
                value, seen = evaluate_traced(raw, names)
            except ExprError as e:
                return Outcome(False, f"{p}: {count:,} records, but {key} cannot be computed: {e}", ev)
            used.update(seen)
            ev[f"{key}_expr"] = raw
        else:
            value = float(raw)
        bounds[key] = value
        ev[key] = int(value) if float(value).is_integer() else value
    if used:
        ev["values"] = used
    if not bounds:
        bounds["min"] = 1
        ev["min"] = 1

    def show(key: str) -> str:
        v = bounds[key]
        text = f"{int(v):,}" if float(v).is_integer() else f"{v:g}"
        expr = args.get(key)
        return f"{text} ({expr})" if isinstance(expr, str) else text

    if "equals" in bounds and count != bounds["equals"]:
        return Outcome(False, f"{p}: {count:,} records, expected exactly {show('equals')}", ev)
    if "min" in bounds and count < bounds["min"]:
        return Outcome(False, f"{p}: {count:,} records, need at least {show('min')}", ev)
    if "max" in bounds and count > bounds["max"]:
        return Outcome(False, f"{p}: {count:,} records, more than the {show('max')} allowed", ev)
    return Outcome(True, f"{p}: {count:,} records", ev)


def _cross(a: dict[str, Any]) -> str | None:
    if (a.get("min") is not None and a.get("max") is not None
            and not isinstance(a["min"], str) and not isinstance(a["max"], str) and a["min"] > a["max"]):
        return f"min ({a['min']}) is larger than max ({a['max']})"
    return names_check([a.get("min"), a.get("max"), a.get("equals")], a.get("values"))


KINDS = (
    Kind("jsonl_records",
         {"path": Field("path", required=True), "min": Field("amount"), "max": Field("amount"),
          "equals": Field("amount"), "values": Field("values")},
         run_jsonl_records, lambda a: short_path(a["path"]), scalar="path", cross=_cross,
         budget=values_budget),
)
