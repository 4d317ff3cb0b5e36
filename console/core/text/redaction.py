"""Values a config takes from the environment (`${env:HF_TOKEN}`) are treated as secrets:
the phase gets the real value, but whatever the console writes under the state dir (the
journal, argv.json, provenance, verify.json, the launcher's log lines) and prints holds
`${env:HF_TOKEN}` in its place.

Redaction replaces the value with the reference it came from, so a record stays readable
and the launcher, which reads its command back from argv.json, restores the real value
from its own environment (inherited from whoever started the run) at exec time. Only the
variable names are ever written. Values shorter than MIN_LENGTH are left alone: redacting
"1" would garble every number in a record, and such a value is no secret."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

MIN_LENGTH = 6


def reference(name: str) -> str:
    return "${env:" + name + "}"


class Redactor:
    """Redacts (and restores) the current values of some environment variables."""

    def __init__(self, names: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.names: tuple[str, ...] = tuple(sorted(set(names)))
        pairs = [(env[n], n) for n in self.names if len(env.get(n, "")) >= MIN_LENGTH]
        # Longest first, so a secret that contains another is replaced whole.
        self._pairs = sorted(pairs, key=lambda p: -len(p[0]))

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def text(self, s: str) -> str:
        for value, name in self._pairs:
            if value in s:
                s = s.replace(value, reference(name))
        return s

    def obj(self, o: Any) -> Any:
        """A copy of a JSON-like value with every string (keys too) redacted."""
        if not self._pairs:
            return o
        return _walk(o, self.text)

    def restore(self, o: Any) -> Any:
        """The inverse, for the launcher: `${env:NAME}` of a known name back to its value."""
        if not self._pairs:
            return o

        def put_back(s: str) -> str:
            for value, name in self._pairs:
                s = s.replace(reference(name), value)
            return s

        return _walk(o, put_back)


def _walk(o: Any, f: Any) -> Any:
    if isinstance(o, str):
        return f(o)
    if isinstance(o, Mapping):
        return {(f(k) if isinstance(k, str) else k): _walk(v, f) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_walk(v, f) for v in o]
    return o


def redactor_for(config: Any) -> Redactor:
    """The redactor of a loaded config (the `${env:...}` names it used)."""
    return Redactor(getattr(config, "secret_env", ()) or ())
