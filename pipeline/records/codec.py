"""What every record shares: its tag and version in the file, the typed decoding of the JSON
into its frozen dataclasses, the bounded read and the atomic write, and the errors.

A record file is a JSON object with `"record": <tag>` and `"version": <n>` beside the
dataclass's fields. The reader refuses what it cannot vouch for, naming the file and the key:
a missing file, a file that is not this record (another record's tag, or JSON without one),
a version it does not know (it names the version found, the ones it knows, and what to do),
a field of the wrong type. Keys it does not know are left alone (a newer writer of the same
version may add fields; none is renamed or removed). A file written before records carried
their tag is still read when it holds the keys that made it that stage's file (`legacy_keys`),
as version 1.

The types a field may have: bool, int, float (a JSON integer is read as a float), str, `X |
None`, `tuple[X, ...]`, `dict[str, X]`, `Literal[...]`, a nested frozen dataclass, and
`object` for a value the record carries without reading it (regenerate's options). A record
may state a rule of its own in `__post_init__` (a count is not negative): its ValueError is
refused like a wrong type.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pipeline.atomic_io import write_bytes_atomic
from pipeline.bounded_read import read_bounded
from pipeline.program_edge import BadInput

TAG = "record"
VERSION_KEY = "version"
MAX_BYTES = 64 << 20  # far above any report or stats; a bound, not a size anyone meets
SHOWN_CHARS = 60  # of a wrong value, in an error

T = TypeVar("T")


class RecordError(BadInput):
    """A file that cannot be read as the record it should be. str() names the file, what is
    wrong and what to do. A BadInput, so a stage exits 2 on it; the console catches it."""


class MissingRecord(RecordError):
    """The file does not exist."""


class NotThisRecord(RecordError):
    """The file is readable but is not this record (another record, or some other JSON)."""


class UnknownVersion(RecordError):
    """This record, of a version the reader does not know."""

    def __init__(self, message: str, found: object, known: tuple[int, ...]) -> None:
        super().__init__(message)
        self.found = found
        self.known = known


class MalformedRecord(RecordError):
    """This record, of a known version, with a field missing or of the wrong type (`where`)."""

    def __init__(self, message: str, where: str, expected: str) -> None:
        super().__init__(message)
        self.where = where
        self.expected = expected


class NotFinite(ValueError):
    """A record that must hold finite figures holds NaN or an infinity: a bug of its writer,
    so nothing is written."""


class _Wrong(Exception):
    def __init__(self, where: str, expected: str, got: object, said: str = "") -> None:
        super().__init__(where)
        self.where, self.expected, self.got, self.said = where, expected, got, said


@dataclass(frozen=True)
class Kind:
    """One record's identity: the tag and versions its files carry, who writes it (named in
    every error, so the operator knows what to rerun), and how it is read."""

    tag: str
    title: str
    writer: str
    version: int
    known: tuple[int, ...]
    legacy_keys: tuple[str, ...] = ()
    finite: bool = False
    limit: int = MAX_BYTES

    # --- writing ---------------------------------------------------------------------------

    def encode(self, record: object) -> dict:
        if getattr(record, VERSION_KEY, None) != self.version:
            raise ValueError(f"a {self.title} of version {getattr(record, VERSION_KEY, None)!r} cannot be "
                             f"written: this writer writes version {self.version}")
        return {TAG: self.tag, **dataclasses.asdict(record)}  # type: ignore[call-overload]

    def dumps(self, record: object, indent: int | None = None) -> str:
        try:
            return json.dumps(self.encode(record), indent=indent, sort_keys=True, ensure_ascii=False,
                              allow_nan=not self.finite)
        except ValueError as e:
            if "JSON compliant" not in str(e):
                raise
            raise NotFinite(f"a figure of this {self.title} is NaN or infinite; nothing is written (a bug: "
                            "please report it with the log)") from None

    def write(self, path: str | os.PathLike[str], record: object) -> None:
        """Temp, fsync, rename: a reader sees the old file or the whole new one."""
        write_bytes_atomic(path, (self.dumps(record, indent=2) + "\n").encode())

    # --- reading ---------------------------------------------------------------------------

    def load(self, path: str | os.PathLike[str], missing: str | None = None) -> dict:
        """The file's JSON object, its tag and version checked; bounded by `limit` bytes,
        a regular file only. `missing`: what a missing file's error says instead of the default."""
        try:
            raw = read_bounded(path, self.limit)
        except FileNotFoundError:
            raise MissingRecord(missing or f"{path} does not exist; run {self.writer} to write it") from None
        except BadInput as e:  # not a regular file, or past the bound
            raise RecordError(f"{e}; pass the {self.title} {self.writer} writes") from None
        except OSError as e:
            raise RecordError(f"{path}: cannot be read ({e.strerror or e})") from None
        return self.parse(raw, os.fspath(path))

    def parse(self, text: str | bytes, source: str) -> dict:
        """JSON text (a file's, or a program's output) as this record's object."""
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise NotThisRecord(f"{source}: not valid JSON ({e}); {self._remedy()}") from None
        if not isinstance(obj, dict):
            raise NotThisRecord(f"{source}: holds a JSON {type(obj).__name__}, not a {self.title}; "
                                f"{self._remedy()}")
        tag = obj.get(TAG)
        if tag != self.tag and not (tag is None and self.legacy_keys and all(k in obj for k in self.legacy_keys)):
            what = f"a {tag!r} record" if isinstance(tag, str) else "JSON of another kind"
            raise NotThisRecord(f"{source}: is {what[:SHOWN_CHARS]}, not a {self.title}; {self._remedy()}")
        found = obj.get(VERSION_KEY, 1 if tag is None else None)
        if isinstance(found, bool) or found not in self.known:
            raise UnknownVersion(
                f"{source}: a {self.title} of version {found!r:.{SHOWN_CHARS}}; this reader knows version "
                f"{', '.join(map(str, self.known))}: rerun {self.writer} to write it again, or update "
                "eagle3-console to a release that reads that version", found, self.known)
        return obj

    def decode(self, cls: type[T], obj: dict, source: str) -> T:
        """The dataclass `cls` from a loaded object, every field's type checked."""
        try:
            return _dataclass(cls, obj, "")
        except _Wrong as w:
            got = json.dumps(w.got, ensure_ascii=False, default=str)
            shown = got if len(got) <= SHOWN_CHARS else got[:SHOWN_CHARS] + "..."
            said = w.said or f"expected {w.expected}, got {shown}"
            where = f"{w.where}: " if w.where else "" if w.said else "the file: "
            raise MalformedRecord(f"{source}: {where}{said}; {self._remedy()}", w.where, w.expected) from None

    def _remedy(self) -> str:
        return f"is this the {self.title} {self.writer} wrote? Rerun it to write the file again"


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _dataclass(cls: type[T], value: object, where: str) -> T:
    if not isinstance(value, dict):
        raise _Wrong(where, "an object", value)
    hints = _hints(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        at = f"{where}.{f.name}" if where else f.name
        if f.name in value:
            kwargs[f.name] = _value(hints[f.name], value[f.name], at)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _Wrong(at, f"{_describe(hints[f.name])} (the key is missing)", None)
    try:
        return cls(**kwargs)
    except ValueError as e:  # a record's own rule (__post_init__), e.g. a count that is negative
        raise _Wrong(where, "a valid value", None, str(e)) from None


def _value(tp: Any, value: object, where: str) -> Any:
    origin = get_origin(tp)
    if tp is object:
        return value
    if origin in (Union, types.UnionType):
        return _union(tp, value, where)
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in get_args(tp)):
            return value
        raise _Wrong(where, _describe(tp), value)
    if origin is tuple:
        if not isinstance(value, list):
            raise _Wrong(where, _describe(tp), value)
        item = get_args(tp)[0]
        return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _Wrong(where, _describe(tp), value)
        item = get_args(tp)[1]
        return {k: _value(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, where)
    return _scalar(tp, value, where)


def _union(tp: Any, value: object, where: str) -> Any:
    options = get_args(tp)
    if value is None and type(None) in options:
        return None
    for option in options:
        if option is type(None):
            continue
        try:
            return _value(option, value, where)
        except _Wrong as w:
            if w.where != where:  # the value had the option's shape and failed inside it: say where
                raise
    raise _Wrong(where, _describe(tp), value)


def _scalar(tp: Any, value: object, where: str) -> Any:
    if tp is bool and isinstance(value, bool):
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, str):
        return value
    raise _Wrong(where, _describe(tp), value)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in get_args(tp))
    if origin is tuple:
        return f"a list of {_plural(get_args(tp)[0])}"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "an object"
    return {bool: "true or false", int: "a whole number", float: "a number", str: "text",
            type(None): "null", object: "a value"}.get(tp, str(tp))


def _plural(tp: Any) -> str:
    return {int: "whole numbers", float: "numbers", str: "texts", bool: "true or false"}.get(tp, "objects")
