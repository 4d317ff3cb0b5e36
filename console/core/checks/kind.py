"""What a check kind is: its argument shape (checked at config load time, so a typo in
a key fails the load instead of the phase), how it runs, and how it is named by
default. The families (fs.py, disk.py, ...) declare their kinds with these; the
registry collects them."""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from console.core.checks.context import CheckContext
from console.core.figures.expr import ExprError, check_expression, check_need, number_of, references
from pipeline.sizes import parse_size


@dataclass(frozen=True)
class Outcome:
    """What a kind's run says: the registry adds name, severity and override."""

    ok: bool
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


class ArgError(ValueError):
    """A check argument of the wrong shape; its text is the one-line load-time message."""


def _got(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def _as_int(value: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    number = number_of(value)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int):
        raise ArgError(f"{what} must be a whole number, got {_got(value)}")
    if lo is not None and number < lo or hi is not None and number > hi:
        bounds = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ArgError(f"{what} must be {bounds}, got {number}")
    return number


def _as_number(value: Any, what: str) -> float:
    if (number := number_of(value)) is None:
        raise ArgError(f"{what} must be a number, got {_got(value)}")
    return float(number)


MAX_TIMEOUT = 6 * 3600.0  # a check is a pre-flight look; a day-long one is a typo (1e9)


def _as_timeout(value: Any, what: str) -> float:
    seconds = _as_number(value, what)
    if not 0 < seconds <= MAX_TIMEOUT:
        raise ArgError(f"{what} must be seconds in (0, {MAX_TIMEOUT:g}] (6 hours), got {value}")
    return seconds


def _as_text(value: Any, what: str) -> str:
    if isinstance(value, (str, PurePath)) and str(value).strip():
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ArgError(f"{what} must be text, got {_got(value) if value != '' else 'nothing'}")


def as_argv(value: Any, what: str) -> list[str]:
    """An argv from a list, or from a string split like a shell would (never run by one)."""
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as e:
            raise ArgError(f"{what} {value!r} cannot be split into arguments: {e}") from None
    elif isinstance(value, (list, tuple)):
        argv = []
        for i, a in enumerate(value):
            if isinstance(a, bool) or not isinstance(a, (str, int, float, PurePath)):
                raise ArgError(f"{what}[{i}] must be text, got {_got(a)}")
            argv.append(str(a))
    else:
        raise ArgError(f"{what} must be a list of arguments or a command line, got {_got(value)}")
    if not argv or not argv[0]:
        raise ArgError(f"{what} is empty: give the program and its arguments")
    return argv


def _as_gpus(value: Any, what: str) -> list[int] | str:
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return "all"
    if isinstance(value, str):
        parts = [p for p in re.split(r"[,\s]+", value.strip()) if p]
        return [_as_int(p, f"{what} entry", lo=0) for p in parts]
    if isinstance(value, (list, tuple)):
        if not value:
            raise ArgError(f"{what} is an empty list: list GPU indices or write \"all\"")
        return [_as_int(v, f"{what}[{i}]", lo=0) for i, v in enumerate(value)]
    return [_as_int(value, what, lo=0)]


def _as_mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not value:
        raise ArgError(f"{what} must be a non-empty mapping (key: value lines), got {_got(value)}")
    return {str(k): v for k, v in value.items()}


def _as_values(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ArgError(f"{what} must map names to JSON files or {{command: [...]}}, got {_got(value)}")
    out: dict[str, Any] = {}
    for name, src in value.items():
        name = str(name)
        where = f"{what}.{name}"
        if not name.isidentifier() or name.startswith("_"):
            raise ArgError(f"{where}: a value name must be an identifier (letters, digits, _)")
        if isinstance(src, bool):
            raise ArgError(f"{where} must be a JSON file, a number or {{command: [...]}}, got {_got(src)}")
        if isinstance(src, (int, float)):
            out[name] = src
        elif isinstance(src, (str, PurePath)):
            out[name] = _as_text(src, where)
        elif isinstance(src, Mapping):
            extra = set(map(str, src)) - {"command", "timeout"}
            if "command" not in src or extra:
                raise ArgError(f"{where} must be a JSON file path or {{command: [argv...], timeout?}}")
            entry: dict[str, Any] = {"command": as_argv(src["command"], f"{where}.command")}
            if "timeout" in src:
                entry["timeout"] = _as_timeout(src["timeout"], f"{where}.timeout")
            out[name] = entry
        else:
            raise ArgError(f"{where} must be a JSON file, a number or {{command: [...]}}, got {_got(src)}")
    return out


def _as_regex(value: Any, what: str) -> str:
    text = _as_text(value, what)
    try:
        re.compile(text, re.MULTILINE)
    except re.error as e:
        raise ArgError(f"{what} {text!r} is not a valid regular expression: {e}") from None
    return text


def _as_need(value: Any, what: str) -> Any:
    problem = check_need(value)
    if problem:
        raise ArgError(f"{what}: {problem}")
    return value


def _as_amount(value: Any, what: str) -> Any:
    """A number, or an expression over named values evaluated when the check runs."""
    if (number := number_of(value)) is not None:
        return number
    if isinstance(value, str):
        try:
            check_expression(value)
        except ExprError as e:
            raise ArgError(f"{what}: {e}") from None
        return value
    raise ArgError(f"{what} must be a number or an expression, got {_got(value)}")


def _as_size(value: Any, what: str) -> int:
    try:
        return parse_size(value)
    except ValueError as e:
        raise ArgError(f"{what}: {e}") from None


def _as_url(value: Any, what: str) -> str:
    text = _as_text(value, what).strip()
    if not re.match(r"^https?://[^/\s]+", text):
        raise ArgError(f"{what} must be an http:// or https:// URL, got {text!r}")
    return text


def _as_module(value: Any, what: str) -> str:
    text = _as_text(value, what).strip()
    if not all(p.isidentifier() for p in text.split(".")):
        raise ArgError(f"{what} must be a dotted module name like sglang.srt, got {text!r}")
    return text


def _as_bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return value.lower() in ("true", "yes")
    raise ArgError(f"{what} must be true or false, got {_got(value)}")


COERCE: dict[str, Callable[[Any, str], Any]] = {
    "path": _as_text,
    "text": _as_text,
    "int": _as_int,
    "count": lambda v, w: _as_int(v, w, lo=0),
    "port": lambda v, w: _as_int(v, w, lo=1, hi=65535),
    "number": _as_number,
    "timeout": _as_timeout,
    "need": _as_need,
    "amount": _as_amount,
    "size": _as_size,
    "regex": _as_regex,
    "argv": as_argv,
    "gpus": _as_gpus,
    "values": _as_values,
    "url": _as_url,
    "module": _as_module,
    "bool": _as_bool,
    "mapping": _as_mapping,
}


@dataclass(frozen=True)
class Field:
    type: str
    required: bool = False
    default: Any = None


Runner = Callable[[dict[str, Any], "CheckContext"], Outcome]


@dataclass(frozen=True)
class Kind:
    """A check kind. `scalar` names the key a scalar argument stands for (`exists: PATH`
    means `exists: {path: PATH}`); `listed` the key a list argument stands for."""

    name: str
    fields: dict[str, Field]
    run: Runner
    label: Callable[[dict[str, Any]], str]
    scalar: str | None = None
    listed: str | None = None
    cross: Callable[[dict[str, Any]], str | None] | None = None
    budget: Callable[[dict[str, Any]], float] | None = None  # seconds the kind may need

    def shape(self) -> str:
        keys = ", ".join(k if f.required else f"{k}?" for k, f in self.fields.items())
        forms = []
        if self.scalar:
            forms.append(f"a {self.scalar}")
        if self.listed:
            forms.append(f"a list ({self.listed})")
        forms.append("{" + keys + "}")
        return " or ".join(forms)

    def parse(self, arg: Any) -> dict[str, Any]:
        """The argument as a dict with defaults filled in; ArgError names what is wrong."""
        if isinstance(arg, Mapping):
            raw = {str(k): v for k, v in arg.items()}
        elif arg is None and not any(f.required for f in self.fields.values()):
            raw = {}
        elif isinstance(arg, (list, tuple)) and self.listed:
            raw = {self.listed: arg}
        elif self.scalar and arg is not None and not isinstance(arg, (list, tuple)):
            raw = {self.scalar: arg}
        else:
            raise ArgError(f"{self.name} needs {self.shape()}; got {_got(arg) if arg is not None else 'nothing'}")
        unknown = [k for k in raw if k not in self.fields]
        if unknown:
            k = unknown[0]
            close = difflib.get_close_matches(k, list(self.fields), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ArgError(f"unknown key '{k}'{hint}; {self.name} takes {self.shape()}")
        out: dict[str, Any] = {}
        for key, f in self.fields.items():
            if key not in raw or raw[key] is None:
                if f.required:
                    raise ArgError(f"{self.name} needs {self.shape()}; '{key}' is missing")
                out[key] = f.default
                continue
            out[key] = COERCE[f.type](raw[key], key)
        if self.cross:
            problem = self.cross(out)
            if problem:
                raise ArgError(problem)
        return out


def short_path(p: str, limit: int = 40) -> str:
    """A path short enough for a check name: long ones keep their last two parts."""
    text = str(p)
    if len(text) <= limit:
        return text
    parts = [x for x in text.replace("\\", "/").split("/") if x]
    return "…/" + "/".join(parts[-2:])


def names_check(exprs: list[Any], values: Mapping[str, Any] | None) -> str | None:
    """Each name an expression reads must be a defined value (caught at load time)."""
    defined = set(values or {})
    for text in exprs:
        if not isinstance(text, str):
            continue
        try:
            parse_size(text)
            continue
        except ValueError:
            pass
        try:
            refs = references(text)
        except ExprError:
            continue
        missing = [r for r in refs if r not in defined]
        if missing:
            have = ", ".join(sorted(defined)) or "none"
            return (f"'{text}' reads '{missing[0]}' but values defines {have}: add "
                    f"values: {{{missing[0]}: path/to/stats.json}}")
    return None
