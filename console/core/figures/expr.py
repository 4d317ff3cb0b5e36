"""Arithmetic a config may write where a number is needed (a disk need computed from a
phase's stats), evaluated by walking a whitelisted `ast`, never with eval: a config must
not run code by accident.

Allowed: numbers, + - * / // % **, unary + and -, parentheses, the functions min, max,
ceil, floor and round, names, and dotted access (`stats.tokens`) or constant subscripts
(`stats["tokens"]`, `shards[0]`) into the nested dicts and lists of a named value.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, cast

from pipeline.sizes import parse_size

MAX_LENGTH = 1000
MAX_EXPONENT = 1000


class ExprError(ValueError):
    """An expression that is not allowed, or cannot be evaluated with the given values."""


_BINOPS: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", operator.pow),
}

_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "round": round,
}

_CONSTRUCTS = {
    ast.Call: "a call",
    ast.Lambda: "a lambda",
    ast.Compare: "a comparison",
    ast.BoolOp: "and/or",
    ast.IfExp: "if/else",
    ast.List: "a list",
    ast.Tuple: "a tuple",
    ast.Dict: "a dict",
    ast.Set: "a set",
    ast.ListComp: "a comprehension",
    ast.GeneratorExp: "a generator",
    ast.JoinedStr: "an f-string",
    ast.NamedExpr: "an assignment (:=)",
    ast.Starred: "a starred argument",
    ast.Slice: "a slice",
}


def _describe(node: ast.AST) -> str:
    for t, what in _CONSTRUCTS.items():
        if isinstance(node, t):
            return what
    if isinstance(node, ast.BinOp):
        return f"the operator {type(node.op).__name__}"
    if isinstance(node, ast.UnaryOp):
        return f"the unary operator {type(node.op).__name__}"
    return type(node).__name__


def _parse(text: str) -> ast.Expression:
    if not isinstance(text, str):
        raise ExprError(f"expression must be text, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        col = f" at column {e.offset}" if e.offset else ""
        raise ExprError(f"'{text}' is not a valid expression{col}: {e.msg}") from None
    _check(tree.body, text)
    return tree


def _dotted(node: ast.AST) -> str | None:
    """'stats.tokens' for a Name/Attribute/constant-Subscript chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _dotted(node.value)
        return None if base is None else f"{base}[{node.slice.value!r}]"
    return None


def _check(node: ast.AST, text: str) -> None:
    """Reject every construct outside the whitelist, naming it."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"'{text}': only numbers are allowed as literals, not {node.value!r}")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ExprError(f"'{text}': {_describe(node)} is not allowed (use + - * / // % **)")
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise ExprError(f"'{text}': {_describe(node)} is not allowed")
        _check(node.operand, text)
    elif isinstance(node, ast.Name):
        if node.id.startswith("__"):
            raise ExprError(f"'{text}': the name '{node.id}' is not allowed")
    elif isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            raise ExprError(f"'{text}': the attribute '{node.attr}' is not allowed")
        if _dotted(node) is None:
            raise ExprError(f"'{text}': attributes are allowed only on named values (stats.tokens)")
    elif isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and isinstance(key.value, (str, int))
                and not isinstance(key.value, bool)):
            raise ExprError(f"'{text}': a subscript must be a constant key or index, like stats[\"tokens\"]")
        if isinstance(key.value, str) and key.value.startswith("__"):
            raise ExprError(f"'{text}': the key '{key.value}' is not allowed")
        if _dotted(node) is None:
            raise ExprError(f"'{text}': subscripts are allowed only on named values")
    elif isinstance(node, ast.Call):
        fn = node.func
        if not isinstance(fn, ast.Name) or fn.id not in _FUNCS:
            what = fn.id if isinstance(fn, ast.Name) else _describe(fn)
            raise ExprError(f"'{text}': calling {what} is not allowed (only {', '.join(_FUNCS)})")
        if node.keywords:
            raise ExprError(f"'{text}': keyword arguments are not allowed in {fn.id}()")
        if not node.args:
            raise ExprError(f"'{text}': {fn.id}() needs an argument")
        for a in node.args:
            _check(a, text)
    else:
        raise ExprError(f"'{text}': {_describe(node)} is not allowed in an expression")


def check_expression(text: str) -> None:
    """Raise ExprError if `text` could never be evaluated (syntax or forbidden construct)."""
    _parse(text)


def references(text: str) -> list[str]:
    """The root names an expression reads, in order of first use ('stats' for stats.tokens)."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call):
            for a in node.args:
                visit(a)
            return
        if isinstance(node, ast.Name) and node.id not in names:
            names.append(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(_parse(text).body)
    return names


def parse_number(text: str) -> int | float:
    """A number written as text: a whole one ("3") stays an int, so a byte count read from
    a stats file or a check's argument keeps its exact value; "3.5" and "1e9" are floats.
    Raises ValueError for text that is not a number."""
    return float(text) if any(c in text for c in ".eE") else int(text)


def number_of(value: Any) -> int | float | None:
    """The number a config's value or a JSON field holds: an int or a float as it is, text
    read by `parse_number`; None for anything else (a bool is not a number). The one reading
    of a number that the checks' arguments and the expressions share."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return parse_number(value)
        except ValueError:
            return None
    return None


def _number(value: Any, what: str) -> int | float:
    if (number := number_of(value)) is not None:
        return number
    if isinstance(value, Mapping):
        keys = ", ".join(list(map(str, value))[:8])
        raise ExprError(f"{what} is an object, not a number (its keys: {keys})")
    raise ExprError(f"{what} is {value!r}, not a number")


class _Evaluator:
    def __init__(self, text: str, names: Mapping[str, Any]) -> None:
        self.text = text
        self.names = names
        self.used: dict[str, int | float] = {}

    def lookup(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise ExprError(f"'{self.text}': unknown name '{node.id}' (values defined: {known})")
            return self.names[node.id]
        key: Any
        if isinstance(node, ast.Attribute):
            base, key = self.lookup(node.value), node.attr
        else:
            assert isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            base, key = self.lookup(node.value), node.slice.value  # a name or an index: checked below
        where = _dotted(node.value)
        if isinstance(base, Mapping):
            if key not in base:
                keys = ", ".join(list(map(str, base))[:12])
                raise ExprError(f"'{self.text}': {where} has no key '{key}' (keys: {keys})")
            return base[key]
        if isinstance(base, list) and isinstance(key, int):
            if not -len(base) <= key < len(base):
                raise ExprError(f"'{self.text}': {where} has {len(base)} items, no index {key}")
            return base[key]
        raise ExprError(f"'{self.text}': {where} is {type(base).__name__}, it has no '{key}'")

    def eval(self, node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant):
            return cast("int | float", node.value)  # the whitelist let only numbers through
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
            dotted = _dotted(node) or "?"
            value = _number(self.lookup(node), dotted)
            self.used[dotted] = value
            return value
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand)
            return -v if isinstance(node.op, ast.USub) else +v
        if isinstance(node, ast.BinOp):
            sym, fn = _BINOPS[type(node.op)]
            a, b = self.eval(node.left), self.eval(node.right)
            if sym == "**":
                if abs(b) > MAX_EXPONENT:
                    raise ExprError(f"'{self.text}': exponent {b} is too large")
                a = float(a)
            try:
                r = fn(a, b)
            except ZeroDivisionError:
                raise ExprError(f"'{self.text}': division by zero ({a} {sym} {b})") from None
            except OverflowError:
                raise ExprError(f"'{self.text}': the result is too large") from None
            if isinstance(r, complex):
                raise ExprError(f"'{self.text}': {a} {sym} {b} is not a real number")
            return r
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        args = [self.eval(a) for a in node.args]
        name = node.func.id
        if name in ("ceil", "floor", "round") and len(args) != 1:
            raise ExprError(f"'{self.text}': {name}() takes one argument")
        try:
            return _FUNCS[name](*args)
        except (OverflowError, ValueError) as e:
            raise ExprError(f"'{self.text}': {name}() failed: {e}") from None


def evaluate(text: str, names: Mapping[str, Any] | None = None) -> float:
    """The value of `text` with `names` (nested dicts/lists of numbers) in scope."""
    return float(evaluate_traced(text, names or {})[0])


def evaluate_traced(text: str, names: Mapping[str, Any]) -> tuple[float, dict[str, int | float]]:
    """The value and every named number it read ({"stats.tokens": 123}), for evidence."""
    tree = _parse(text)
    ev = _Evaluator(text.strip(), names)
    value = ev.eval(tree.body)
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError(f"'{text}': the result is not a finite number")
    return float(value), ev.used


def parse_need(value: Any, names: Mapping[str, Any] | None = None) -> int:
    """Bytes from a size ("500GB"), a number of bytes, or an expression over `names`."""
    return need_traced(value, names or {})[0]


def need_traced(value: Any, names: Mapping[str, Any]) -> tuple[int, dict[str, int | float]]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return parse_size(value), {}
    if not isinstance(value, str):
        raise ExprError(f"{value!r} is neither a size (500GB) nor an expression")
    try:
        return parse_size(value), {}
    except ValueError:
        pass
    result, used = evaluate_traced(value, names)
    if result < 0:
        raise ExprError(f"'{value}' is negative ({result:g}); a size cannot be")
    return math.ceil(result), used


def check_need(value: Any) -> str | None:
    """What is wrong with a need as written (None when it is a size or a valid expression)."""
    if isinstance(value, bool):
        return f"{value!r} is neither a size (500GB) nor an expression"
    if isinstance(value, (int, float)):
        return None if value >= 0 else f"{value} is negative"
    if not isinstance(value, str):
        return f"{type(value).__name__} is neither a size (500GB) nor an expression"
    try:
        parse_size(value)
        return None
    except ValueError as size_error:
        try:
            check_expression(value)
        except ExprError as e:
            if not any(c in value for c in "*/+()") and not value.strip().replace(".", "").isidentifier():
                return str(size_error)
            return str(e)
    return None
