"""What the operator sees when the console itself breaks: one line on stderr naming a
crash log that holds the traceback, and a non-zero exit. A Textual error screen or a
traceback would scroll the terminal away, and an exit code of 0 would tell a wrapper
script that all went well."""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

EXIT_CRASH = 3


def write_crash_log(error: BaseException, state_dir: str | os.PathLike[str] | None) -> Path:
    """Writes the traceback to `<state_dir>/crash/console-<time>-<pid>.log` (owner-only),
    or to the temp folder when the state dir cannot take it; the path written."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"console-{stamp}-{os.getpid()}.log"
    folders = [Path(state_dir) / "crash"] if state_dir is not None else []
    folders.append(Path(tempfile.gettempdir()))
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return path
        except OSError:
            continue
    return Path("(no writable folder for a crash log)")


def one_line(error: BaseException) -> str:
    """The error's first meaningful line, for stderr."""
    text = str(error).strip()
    for line in text.splitlines():
        line = line.strip(" •\t")
        if line:
            return f"{type(error).__name__}: {line}"[:300]
    return type(error).__name__
