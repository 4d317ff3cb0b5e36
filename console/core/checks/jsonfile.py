"""json_matches: fields of a JSON file equal given values or the fields of another JSON
file. It is how a config says "the hidden-state store was made from this target" (the
store's meta.json against the target's config.json) before hours of training read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.fs import nearest_existing
from console.core.checks.kind import Field, Kind, Outcome, short_path
from pipeline.records import known
from pipeline.records.codec import RecordError

_MISSING = object()


def dig(obj: Any, dotted: str) -> Any:
    """`a.b.0.c` into nested dicts and lists; _MISSING when any step is absent."""
    for part in dotted.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return _MISSING
    return obj


def _load(p: Path) -> tuple[Any, str | None]:
    """The file's JSON, or why not; a stage's record is read through the record (its version)."""
    try:
        return known.load_file(p), None
    except FileNotFoundError:
        near = nearest_existing(p.parent)
        hint = "" if near == p.parent else f" (nearest existing folder: {near})"
        return None, f"{p} does not exist{hint}"
    except RecordError as e:
        return None, str(e)
    except (OSError, UnicodeDecodeError) as e:
        return None, f"cannot read {p}: {getattr(e, 'why', None) or e}"
    except ValueError as e:
        return None, f"{p} is not valid JSON: {e}"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def _show(v: Any) -> str:
    return "missing" if v is _MISSING else json.dumps(v)


def run_json_matches(args: dict[str, Any], ctx: CheckContext) -> Outcome:
    p = ctx.resolve(args["path"])
    data, err = _load(p)
    if err:
        return Outcome(False, err, {"path": str(p)})
    compared: dict[str, dict[str, Any]] = {}
    bad: list[str] = []
    for key, want in (args.get("expect") or {}).items():
        got = dig(data, key)
        compared[key] = {"got": None if got is _MISSING else got, "want": want}
        if got is _MISSING or not _same(got, want):
            bad.append(f"{key} is {_show(got)}, expected {json.dumps(want)}")
    other_path = None
    if args.get("same_as"):
        other_path = ctx.resolve(args["same_as"])
        other, err = _load(other_path)
        if err:
            return Outcome(False, err, {"path": str(p), "same_as": str(other_path)})
        for key, other_key in (args.get("keys") or {}).items():
            other_key = str(other_key)
            got, want = dig(data, key), dig(other, other_key)
            compared[key] = {"got": None if got is _MISSING else got,
                             "want": None if want is _MISSING else want, "from": f"{other_path.name}:{other_key}"}
            if got is _MISSING or want is _MISSING or not _same(got, want):
                bad.append(f"{key} is {_show(got)} but {other_path.name} {other_key} is {_show(want)}")
    evidence = {"path": str(p), "compared": compared}
    if other_path is not None:
        evidence["same_as"] = str(other_path)
    if bad:
        return Outcome(False, f"{p.name} differs: " + "; ".join(bad), evidence)
    summary = ", ".join(f"{k}={_show(v['got'])}" for k, v in compared.items())
    tail = f" (as in {other_path.name})" if other_path is not None else ""
    return Outcome(True, f"{p.name} matches: {summary}{tail}", evidence)


def _cross(a: dict[str, Any]) -> str | None:
    if not a.get("expect") and not a.get("keys"):
        return "json_matches needs `expect: {key: value}` or `same_as: FILE` with `keys: {key: other_key}`"
    if bool(a.get("same_as")) != bool(a.get("keys")):
        return "json_matches: `same_as` and `keys` go together (keys maps this file's keys to the other's)"
    return None


KINDS = (
    Kind("json_matches",
         {"path": Field("path", required=True), "expect": Field("mapping"),
          "same_as": Field("path"), "keys": Field("mapping")},
         run_json_matches, lambda a: short_path(a["path"]), cross=_cross),
)
