"""What a bench's result file starts with and how its lines reach it: the commit measured, the
time in UTC, and every line printed and written as it comes (a run cut short keeps what it said)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def utc_now() -> str:
    """The wall-clock time a result file or a log names, in UTC: device calls and notes compare them."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())


def commit(given: str | None, result: Path | None) -> str:
    """HEAD, and whether tracked files differ from it (the --result file this run rewrites aside);
    `given` where the tree has no .git (a device's copy)."""
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                 capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git here; pass --commit)"
    mine = str(result.resolve().relative_to(REPO)) if result and result.resolve().is_relative_to(REPO) else None
    dirty = [line for line in changed if line[3:] != mine]
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "") if out.returncode == 0 else \
        "unknown (no .git here; pass --commit)"


class Log:
    """Every line to stdout and, as it is printed, to the result file (emptied first unless `append`)."""

    def __init__(self, path: Path | None, append: bool = False) -> None:
        self.path = path
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not append:
                path.write_text("")

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(line + "\n")
