"""Which `python` a phase or a check command gets. Phases say `python -m pipeline.X`; that
must be the console's own environment (where `make demo` installed the pipeline) even
when the operator did not activate the virtualenv."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def path_with_interpreter(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{"PATH": ...} with this interpreter's bin folder first, or {} outside a virtualenv
    or when it is first already."""
    env = os.environ if environ is None else environ
    bindir = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if sys.prefix == sys.base_prefix or path.split(os.pathsep)[0] == bindir:
        return {}
    return {"PATH": bindir + os.pathsep + path}
