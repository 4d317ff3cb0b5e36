"""Limits a config must stay within before it is composed into nodes.

PyYAML composes recursively (a 5,000-deep document ends in RecursionError), constructs any
tag it knows, and an alias reuses its anchor's whole subtree, so nine nested levels of
nine aliases stand for 9**9 values that walking them would visit one by one. One pass over
the event stream (which the parser produces without recursion) refuses all of these with
the line and the key, before anything is built."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

MAX_DEPTH = 64          # a real config nests about 6 deep
MAX_VALUES = 100_000    # values after expanding aliases; a 300-line config has ~2,000
# Tags a config may spell out; anything else (`!foo`, `!!python/object`, `!!binary`) is refused.
SAFE_TAGS = {None, "!"} | {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}


class BoundsError(ValueError):
    def __init__(self, message: str, line: int | None, key: str) -> None:
        super().__init__(message)
        self.line = line
        self.key = key


@dataclass
class _Level:
    mapping: bool
    key: str
    expect_key: bool = True
    index: int = 0
    pending: str | None = None
    anchors: list[str] = field(default_factory=list)


def _child_key(stack: list[_Level]) -> str:
    if not stack:
        return ""
    top = stack[-1]
    if top.mapping:
        name = top.pending if top.pending is not None else "?"
        return f"{top.key}.{name}" if top.key else name
    return f"{top.key}[{top.index}]"


def check(text: str, loader: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = yaml.SafeLoader) -> None:
    """Raise BoundsError naming the line and key of the first thing past a limit. `loader`'s
    parser produces the events (libyaml's where the composer has it)."""
    stack: list[_Level] = []
    sizes: dict[str, int] = {}          # anchor -> values it stands for
    open_anchors: dict[str, int] = {}   # anchor -> count of values when it opened
    total = 0

    def advance() -> None:
        """A value ended inside the container on top: the next is a key, or the next item."""
        if not stack:
            return
        top = stack[-1]
        if top.mapping:
            if top.expect_key:
                top.expect_key = False
            else:
                top.expect_key, top.pending = True, None
        else:
            top.index += 1

    def line(ev: yaml.Event) -> int | None:
        return ev.start_mark.line + 1 if ev.start_mark else None

    for ev in yaml.parse(text, Loader=loader):
        tag = getattr(ev, "tag", None)
        if (isinstance(ev, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent))
                and tag not in SAFE_TAGS):
            raise BoundsError(f"the YAML tag {tag} is not allowed in a config; remove it "
                              "(values are plain text, numbers, lists and mappings)",
                              line(ev), _child_key(stack))
        if isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in sizes:
                raise BoundsError(f"alias *{ev.anchor} refers to an anchor that is not complete here",
                                  line(ev), _child_key(stack))
            total += sizes[ev.anchor]
            if total > MAX_VALUES:
                raise BoundsError(f"aliases expand to more than {MAX_VALUES} values (an alias bomb?); "
                                  "write the values out or use ${vars}", line(ev), _child_key(stack))
            advance()
        elif isinstance(ev, yaml.ScalarEvent):
            total += 1
            if stack and stack[-1].mapping and stack[-1].expect_key:
                stack[-1].pending = ev.value
            if ev.anchor:
                sizes[ev.anchor] = 1
            advance()
        elif isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            total += 1
            key = _child_key(stack)
            if len(stack) >= MAX_DEPTH:
                raise BoundsError(f"nested more than {MAX_DEPTH} levels deep; a config is a few levels of "
                                  "mappings and lists", line(ev), key)
            level = _Level(mapping=isinstance(ev, yaml.MappingStartEvent), key=key)
            if ev.anchor:
                open_anchors[ev.anchor] = total - 1
                level.anchors.append(ev.anchor)
            stack.append(level)
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            level = stack.pop()
            for a in level.anchors:
                sizes[a] = total - open_anchors.pop(a)
            advance()
        if total > MAX_VALUES:
            raise BoundsError(f"more than {MAX_VALUES} values; a config is far smaller",
                              line(ev), _child_key(stack))
