"""Reading a project's config again when its files change, so a console left open for days
runs and judges what the files say now: an operator who saves a value with `eagle3 set`
in another shell, or edits the YAML, gets the same answer from the console as from
`eagle3 status`, and the console's next start runs the new values.

The files are the config and its overlay (`<stem>.local.yaml`, `eagle3 set`'s); a look
costs two stats. A change is judged by size, modification time and inode (an atomic
rename gives a new inode even within one mtime tick). The command line's `--set` values
the console was started with stay on top, as they did at the start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from console.core.config.loader import load_config
from console.core.config.overlay import overlay_path
from console.core.model.config import Config
from console.core.text.errors import ConfigError, Eagle3Error

Signature = tuple[tuple[int, int, int] | None, ...]


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


@dataclass
class ConfigSource:
    """Where a project's config came from: the YAML as given, the `--set` values on top."""

    path: Path
    overrides: dict[str, str]
    seen: Signature = ()
    broken: ConfigChanged | None = None  # the files changed and do not load: why

    @classmethod
    def of(cls, path: str | os.PathLike[str], overrides: Mapping[str, str] | None) -> ConfigSource:
        return cls(Path(path), dict(overrides or {}))

    def signature(self) -> Signature:
        resolved = self.path.expanduser()
        return (_stat(resolved), _stat(overlay_path(resolved.resolve())))

    def load(self) -> Config:
        """The config as the files say now. Remembers what it read, even when it does not
        load, so a broken file is reported once, not at every look; raises ConfigChanged
        then (the first load's caller reads its `cause`)."""
        sig = self.signature()
        try:
            config = load_config(self.path, self.overrides)
        except ConfigError as e:
            self.broken = ConfigChanged(e)
            raise self.broken from None
        finally:
            self.seen = sig
        self.broken = None
        return config

    def changed(self) -> bool:
        return self.signature() != self.seen


class ConfigChanged(Eagle3Error):
    """The files changed and no longer make a config: the project keeps the one it had."""

    def __init__(self, cause: ConfigError) -> None:
        super().__init__(str(cause))
        self.cause = cause

    def __str__(self) -> str:
        return f"the config changed and does not load: {self.cause}"
