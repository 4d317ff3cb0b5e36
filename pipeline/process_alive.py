"""Whether the process that left a temporary (named for its pid) is still running: stages
sweep the temporaries of writers killed outright, and must never take a live writer's."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"  # a zombie is dead
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
