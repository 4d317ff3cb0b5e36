"""Durations as the console prints them and as operators write them, one definition for
the CLI, the UI and the journal's alerts."""

from __future__ import annotations

import math
import re
import time
from typing import Any

MAX_DURATION = 30 * 86400.0
MAX_SHOWN = 365 * 86400.0
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*$", re.IGNORECASE)
# What format_duration prints, read back: 4m05s, 2h03m, 1d2h30m (each unit once, largest first).
_PART = r"(?:(\d+)\s*{})?"
_COMPOUND = re.compile(r"^\s*" + r"\s*".join(_PART.format(u) for u in ("d", "h", "(?:min|m)", "s")) + r"\s*$",
                       re.IGNORECASE)


def format_duration(s: float | None, unknown: str = "—") -> str:
    """3s, 4m05s, 2h03m, 3d04h: two units at most; `unknown` for None, NaN or infinity;
    "> 1 y" past a year (a forecast that far out says only "not soon")."""
    if s is None or not math.isfinite(s):
        return unknown
    if s > MAX_SHOWN:
        return "> 1 y"
    s = max(0, int(s))
    if s < 60:
        return f"{s}s"
    m, sec = divmod(s, 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def parse_duration(value: Any) -> float:
    """Seconds from `90`, `90s`, `15m`, `2h`, `1d`, or a compound as `format_duration`
    prints one (`8m30s`, `2h03m`, `1d2h`); `off`/`0`: 0. Raises ValueError
    with what was expected; bounded to 30 days."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 90s, 15m or 2h, got {value!r}")
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        text = str(value).strip().lower()
        if text in ("off", "none", "never"):
            return 0.0
        m = _DURATION.match(text)
        parts = None if m else _COMPOUND.match(text)
        if m:
            secs = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
        elif parts and any(parts.groups()):
            secs = float(sum(int(n) * u for n, u in zip(parts.groups(), (86400, 3600, 60, 1)) if n))
        else:
            raise ValueError(f"expected a duration like 90s, 15m, 8m30s or 2h, got {value!r}")
    if not 0 <= secs <= MAX_DURATION:
        raise ValueError(f"a duration between 0 and 30d, got {value!r}")
    return secs


class Elapsed:
    """How long a run has taken, for the records that carry its start and end (a run's
    status and its phase's): one formula, so the CLI, the UI and `status --json` agree."""

    started_at: float | None
    ended_at: float | None

    @property
    def duration_s(self) -> float | None:
        """Until now while it has not ended; None before it started."""
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else time.time()
        return max(0.0, end - self.started_at)
