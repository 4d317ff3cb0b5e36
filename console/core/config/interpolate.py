"""`${name}` substitution. Kept apart from the loader so the rules (nesting, `${env:NAME}`,
`$${` escapes, cycle detection) can be read and tested on their own."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping

_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
MAX_VALUE = 65_536  # characters in one value after substitution


class InterpolationError(ValueError):
    """Raised with an operator-facing message; the loader adds file, line and key.
    `var` names the variable whose value failed, when the failure is inside vars."""

    var: str | None = None


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return f" (defined: {', '.join(sorted(known))})" if known else " (no variables are defined under vars:)"


def substitute(text: str, lookup: Mapping[str, str], environ: Mapping[str, str] | None = None,
               used_env: set[str] | None = None) -> str:
    """Replace every `${name}` and `${env:NAME}` in `text` with values already resolved.
    `used_env` collects the names whose values came from the environment (redaction.py)."""
    env = os.environ if environ is None else environ
    size = [len(text)]

    def grow(value: str) -> str:
        size[0] += len(value)
        if size[0] > MAX_VALUE:
            raise InterpolationError(f"expands to more than {MAX_VALUE} characters (variables that repeat "
                                     "each other many times?); a value is a path or a short setting")
        return value

    def repl(m: re.Match[str]) -> str:
        return grow(value_of(m))

    def value_of(m: re.Match[str]) -> str:
        if m.group(0) == "$${":
            return "${"
        ref = m.group(1).strip()
        if ref.startswith("env:"):
            name, _, default = ref[4:].partition(":-")
            if name in env:
                if used_env is not None:
                    used_env.add(name)
                return env[name]
            if ":-" in ref:
                return default
            raise InterpolationError(
                f"environment variable {name} is not set; export it or write ${{env:{name}:-default}}"
            )
        if not _NAME.match(ref):
            raise InterpolationError(f"'${{{ref}}}' is not a valid variable reference")
        if ref not in lookup:
            raise InterpolationError(f"unknown variable '${{{ref}}}'" + _suggest(ref, list(lookup)))
        return lookup[ref]

    return _REF.sub(repl, text)


def resolve_vars(raw: Mapping[str, str], environ: Mapping[str, str] | None = None,
                 used_env: set[str] | None = None) -> dict[str, str]:
    """Resolve variables that reference each other, in any order; a cycle is an error
    naming the chain (a -> b -> a)."""
    done: dict[str, str] = {}
    visiting: list[str] = []

    class _Lazy(Mapping[str, str]):
        def __getitem__(self, key: str) -> str:
            return resolve(key)

        def __contains__(self, key: object) -> bool:
            return key in raw

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(raw)

        def __len__(self) -> int:
            return len(raw)

    lazy = _Lazy()

    def resolve(name: str) -> str:
        if name in done:
            return done[name]
        if name in visiting:
            chain = " -> ".join(visiting[visiting.index(name):] + [name])
            raise InterpolationError(f"variables refer to each other in a cycle: {chain}")
        visiting.append(name)
        try:
            done[name] = substitute(raw[name], lazy, environ, used_env)
        except InterpolationError as e:
            if e.var is None:
                e.var = name
            raise
        finally:
            visiting.pop()
        return done[name]

    for key in raw:
        resolve(key)
    return done
