"""What a launcher says and records for its run: stamped lines in the run's `output.log` and
journal records. Neither may end a run: a journal the full disk refuses costs the record only.

The launcher and the supervision it loads once the phase has started both speak through here,
so their lines keep one format and their place among the phase's own lines."""

from __future__ import annotations

import sys
import time
from typing import Any

from console.core.records.journal import Journal
from console.core.runs.rundir import RunDir
from console.core.text.redaction import Redactor


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[eagle3 {stamp}] {msg}", file=sys.stderr, flush=True)


def redactor_of(argv: dict[str, Any]) -> Redactor:
    """Hides the run's `${env:...}` values (named in argv.json) in what the launcher writes."""
    return Redactor(argv.get("secret_env") or ())


def journal(rd: RunDir, event: str, redactor: Redactor | None = None, **fields: Any) -> None:
    try:
        Journal(rd.state_dir, redactor).append(event, **fields)
    except OSError as e:
        log(f"could not write the journal {rd.state_dir / 'journal.jsonl'}: {e}")
