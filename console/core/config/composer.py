"""The bounded YAML composer of config-shaped files (the config and the saved-overrides
file beside it): one place that bounds depth, aliases and tags before PyYAML composes, and
turns every YAML error into one ConfigError naming the file and line.

PyYAML's libyaml parser composes a file where there is one (the wheels ship it): a 300-line
config in 15 ms of a core, not 95, for each console, CLI call and launcher that reads it.
It yields the nodes the Python parser does, resolved by the same resolver; a file it refuses,
or one that fails a bound, is composed again by the Python parser, whose errors the messages
below were written for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from console.core.config import bounds
from console.core.text.errors import ConfigError

# `${var}` inside a flow list (`volumes: [${workdir}, /dev/shm]`) is not valid YAML, yet it
# is the natural way to write a config; the braces are swapped for private-use characters
# before parsing and swapped back in every scalar.
_REF = re.compile(r"\$\{([^{}\n]*)\}")
_OPEN, _CLOSE = "\ue000", "\ue001"
_FAST: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)
Loader = yaml.SafeLoader | yaml.CSafeLoader


def protect(text: str) -> str:
    return _REF.sub(lambda m: "$" + _OPEN + m.group(1) + _CLOSE, text)


def restore(value: Any) -> Any:
    """A scalar as written: the braces `protect` swapped out put back."""
    if isinstance(value, str):
        return value.replace(_OPEN, "{").replace(_CLOSE, "}")
    return value


def compose(file: Path, text: str) -> tuple[Loader, yaml.Node | None]:
    """The YAML node tree of a config-shaped file, bounded (depth, aliases, tags) before it is
    composed, and every YAML error as one ConfigError naming the file and line. The caller
    disposes of the loader once it has read the nodes."""
    protected = protect(text)
    if _FAST is not None:
        fast = _fast(protected, _FAST)
        if fast is not None:
            return fast
    try:
        loader = yaml.SafeLoader(protected)
    except yaml.reader.ReaderError as e:
        raise _unreadable(file, text, e) from None
    try:
        bounds.check(protected)
        return loader, loader.get_single_node()
    except bounds.BoundsError as e:
        loader.dispose()
        raise ConfigError(file, str(e), line=e.line, key=restore(e.key) or None) from None
    except RecursionError:
        loader.dispose()
        raise ConfigError(file, f"nested too deeply (more than {bounds.MAX_DEPTH} levels)") from None
    except yaml.MarkedYAMLError as e:
        loader.dispose()
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        problem = e.problem or "invalid YAML"
        raise ConfigError(file, f"YAML syntax error: {problem}" + (f" ({e.context})" if e.context else ""),
                          line=line) from None
    except yaml.YAMLError as e:
        loader.dispose()
        raise ConfigError(file, f"YAML syntax error: {e}") from None


def _fast(protected: str, loader_class: type[yaml.CSafeLoader]) -> tuple[Loader, yaml.Node | None] | None:
    """The nodes by libyaml, or None where it refuses the text or a bound fails (the Python
    parser then says why, in its words)."""
    try:
        bounds.check(protected, loader_class)
        loader = loader_class(protected)
    except (bounds.BoundsError, yaml.YAMLError, ValueError):
        return None
    try:
        return loader, loader.get_single_node()
    except (yaml.YAMLError, ValueError):
        loader.dispose()
        return None


def _unreadable(file: Path, text: str, e: yaml.reader.ReaderError) -> ConfigError:
    """A character YAML refuses to read (a NUL, a control character): PyYAML names only its
    offset in the string, so the line and column are counted here. `protect` keeps offsets."""
    where = max(0, min(e.position, len(text)))
    line = text.count("\n", 0, where) + 1
    column = where - (text.rfind("\n", 0, where) + 1) + 1
    char = f"U+{e.character:04X}" if isinstance(e.character, int) else repr(e.character)
    return ConfigError(file, f"column {column}: the character {char} is not allowed in YAML ({e.reason}); "
                             "remove it (is this a binary file, or a paste with control characters?)", line=line)
