"""Byte sizes as operators write them (configs, --reserve, --budget) and as both sides print
them (artifact bytes, the console's panels, a stage's progress line): one definition, so
`1.001GB` means the same bytes everywhere. The console may import this module (stdlib only).

Units follow GNU coreutils: a unit ending in "B" after a letter is SI (KB = 1000, GB = 10**9),
a unit with "i" is IEC (KiB = 1024; "Gi" as Kubernetes writes it too), and a bare letter is IEC
(512M = 512 MiB, as dd and docker read it); case-insensitive; a bare number is bytes. Printed
sizes are SI with one decimal ("412.3 GB"), as `df -H` shows."""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

_SIZE_PREFIXES = "kmgtpe"

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)

SIZE_HINT = "use a number of bytes or a number with a unit: 500GB, 1.5TiB, 512M"


def _multiplier(unit: str) -> int | None:
    u = unit.lower()
    if u in ("", "b"):
        return 1
    p = u[0]
    if p not in _SIZE_PREFIXES:
        return None
    power = _SIZE_PREFIXES.index(p) + 1
    rest = u[1:]
    if rest == "b":
        return 1000**power
    if rest in ("", "i", "ib"):
        return 1024**power
    return None


def parse_size(s: str | int | float) -> int:
    """Bytes for "500GB", "1.5TB", "10GiB", "512M", 1024 or "0"; ValueError otherwise."""
    if isinstance(s, bool):
        raise ValueError(f"{s!r} is not a size: {SIZE_HINT}")
    if isinstance(s, int):
        if s < 0:
            raise ValueError(f"size {s} is negative: {SIZE_HINT}")
        return s
    if isinstance(s, float):
        if not math.isfinite(s) or s < 0:
            raise ValueError(f"size {s} is not a non-negative number: {SIZE_HINT}")
        return int(Decimal(repr(s)).to_integral_value(ROUND_HALF_UP))
    if not isinstance(s, str):
        raise ValueError(f"{s!r} is not a size ({type(s).__name__}): {SIZE_HINT}")
    if s.strip().startswith("-"):
        raise ValueError(f"size {s!r} is negative: {SIZE_HINT}")
    m = _SIZE_RE.match(s)
    mult = _multiplier(m.group(2)) if m else None
    if m is None or mult is None:
        raise ValueError(f"{s!r} is not a size: {SIZE_HINT}")
    try:
        value = Decimal(m.group(1)) * mult
    except InvalidOperation as e:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{s!r} is not a size: {SIZE_HINT}") from e
    return int(value.to_integral_value(ROUND_HALF_UP))


_SIZE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")


def format_bytes(n: int | float, digits: int = 1, compact: bool = False) -> str:
    """SI: 0 B, 512 B, 1.5 KB, 412.3 GB, 1.2 TB; `compact` for narrow panels: 512B, 1.5K, 1.2T."""
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    if v < 1000:
        return f"{sign}{int(round(v))}{'' if compact else ' '}B"
    i = 0
    carry = 1000 - 0.5 * 10.0 ** -digits  # rounds up to the next unit: 999.96 KB prints as 1.0 MB
    while v >= carry and i < len(_SIZE_UNITS) - 1:
        v /= 1000
        i += 1
    unit = _SIZE_UNITS[i][0] if compact else " " + _SIZE_UNITS[i]
    return f"{sign}{v:.{digits}f}{unit}"
