"""Which `python` a phase or a check command gets.

Phases say `python -m pipeline.X`. Without a `python:` setting that is the console's own
environment (where `make demo` installed the pipeline), even when the operator did not
activate the virtualenv. The pipeline often lives elsewhere (SGLang pins its own torch), so
a config, or one phase, may name another interpreter with `python: /envs/sgl/bin/python`:
then `python` in `run:` and in check commands is that one, and its bin folder comes first
on PATH (so `torchrun` or `sglang` resolve in that environment too)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# The argv[0] spellings that mean "the configured interpreter".
PYTHON_NAMES = ("python", "python3")


def locate(setting: str | None) -> Path | None:
    """The interpreter a `python:` setting names, if it exists and is executable: a path
    (already resolved against the config folder by the loader) or a bare name on PATH.
    None setting: the console's own interpreter."""
    if not setting:
        return Path(sys.executable)
    if "/" not in setting:
        found = shutil.which(setting)
        return Path(found) if found else None
    p = Path(setting)
    return p if p.is_file() and os.access(p, os.X_OK) else None


def missing_message(setting: str) -> str:
    """One operator line for a `python:` that names nothing runnable."""
    p = Path(setting)
    if "/" not in setting:
        return f"interpreter '{setting}' (python:) is not on PATH; give its full path"
    if not p.exists():
        return f"interpreter {setting} (python:) does not exist; create that environment or fix the path"
    return f"interpreter {setting} (python:) is not an executable file"


def interpreter_path(setting: str | None) -> str:
    """What to exec for `python`: the configured setting as written (a missing one fails at
    exec with its own name) or the console's interpreter."""
    if not setting:
        return sys.executable
    found = locate(setting)
    return str(found) if found is not None else setting


def python_argv(argv: Sequence[str], setting: str | None = None) -> list[str]:
    """argv with a leading `python`/`python3` replaced by the interpreter it means."""
    out = [str(a) for a in argv]
    if out and out[0] in PYTHON_NAMES:
        out[0] = interpreter_path(setting)
    return out


def path_with_interpreter(environ: Mapping[str, str] | None = None,
                          setting: str | None = None) -> dict[str, str]:
    """{"PATH": ...} with the interpreter's bin folder first, or {} when it is first
    already (or, for the console's own interpreter, outside a virtualenv). The folder is the
    one the setting names, not its symlink target: a venv's bin/python links elsewhere."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", "")
    if setting:
        found = locate(setting)
        if found is None:
            return {}
        bindir = str(Path(os.path.abspath(found)).parent)
    else:
        if sys.prefix == sys.base_prefix:
            return {}
        bindir = str(Path(sys.executable).parent)
    if path.split(os.pathsep)[0] == bindir:
        return {}
    return {"PATH": bindir + os.pathsep + path if path else bindir}
