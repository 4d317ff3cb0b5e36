"""Saving the operator's overrides (`eagle3 set`, and `--set ... --save` on any command): the
overlay (overlay.py) rewritten with some values set and some cleared, journaled, and written
only once the new values make a config that loads.

Read, changed and written under the overlay's lock: two `eagle3 set` at once must both land,
not the second overwrite the first's value. The config is first loaded without its overlay, so
an overlay that it rejects can still be fixed by saving over it."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from console.core.config.loader import load_config
from console.core.config.overlay import overlay_lock, overlay_path, read_saved, write_saved
from console.core.model.config import Config
from console.core.records.journal import Journal
from console.core.text.errors import Eagle3Error
from console.core.text.redaction import redactor_for


class BadOverride(Eagle3Error):
    """An assignment that is not VAR=VALUE or names no variable of the config, or a name to
    forget that is not saved: a usage error (the CLI exits 2)."""


@dataclass(frozen=True)
class SavedOverrides:
    """What a save did. `config`: the config as it loads now (None when nothing changed);
    `given`: the values this save named; `changed`: those that differ from before; `cleared`:
    the names forgotten."""

    file: Path
    config: Config | None
    given: dict[str, str]
    changed: dict[str, str]
    cleared: list[str]


def save_overrides(config_arg: str, assignments: Sequence[str], clear: Sequence[str],
                   what: str = "set") -> SavedOverrides:
    """Set `assignments` (VAR=VALUE) and forget `clear` in the overlay of the config at
    `config_arg`. `what` names the flag an error speaks of (`set`, `--set`)."""
    base = load_config(config_arg, saved={})
    with overlay_lock(base.path):
        file = overlay_path(base.path)
        current = dict(read_saved(base.path))
        given = _assignments(base, assignments, what)
        new = _without(current, clear)
        new.update(given)
        changed = {k: v for k, v in new.items() if current.get(k) != v}
        cleared = [k for k in current if k not in new]
        if not changed and not cleared:
            return SavedOverrides(file, None, given, changed, cleared)
        config = load_config(config_arg, saved=new)  # the values must make a config that loads
        write_saved(base.path, new)
        Journal(config.state_dir, redactor_for(config)).append("overrides_saved", file=str(file), set=changed,
                                                               cleared=cleared)
        return SavedOverrides(file, config, given, changed, cleared)


def _assignments(base: Config, assignments: Sequence[str], what: str) -> dict[str, str]:
    given = {}
    for item in assignments:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise BadOverride(f"{what} {item}: expected VAR=VALUE")
        name = name.strip()
        if name not in base.vars:
            close = difflib.get_close_matches(name, list(base.vars), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise BadOverride(f"{what} {item}: {base.path} has no variable '{name}' under vars:; {hint}"
                              f"(vars: {', '.join(base.vars) or 'none'})")
        given[name] = value
    return given


def _without(current: dict[str, str], clear: Sequence[str]) -> dict[str, str]:
    new = dict(current)
    for name in clear:
        if name not in new:
            close = difflib.get_close_matches(name, list(new), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise BadOverride(f"set --clear {name}: not a saved override{hint} (saved: {', '.join(new) or 'none'})")
        del new[name]
    return new
