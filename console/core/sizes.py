"""Byte sizes as operators write them in configs, and as the console prints them.

Units follow GNU coreutils: a unit ending in "B" after a letter is SI (KB = 1000,
GB = 10**9, TB = 10**12), a unit with "i" is IEC (KiB = 1024, GiB = 2**30; "Gi" as
Kubernetes writes it is accepted too), and a bare letter is IEC (512M = 512 MiB,
as dd and docker read it). Units are case-insensitive. A bare number is bytes.
Printed sizes are SI with one decimal ("412.3 GB"), matching what `df -H` shows.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, ROUND_HALF_UP

_PREFIXES = "kmgtpe"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)

HINT = "use a number of bytes or a number with a unit: 500GB, 1.5TiB, 512M"


def _multiplier(unit: str) -> int | None:
    u = unit.lower()
    if u in ("", "b"):
        return 1
    p = u[0]
    if p not in _PREFIXES:
        return None
    power = _PREFIXES.index(p) + 1
    rest = u[1:]
    if rest == "b":
        return 1000**power
    if rest in ("", "i", "ib"):
        return 1024**power
    return None


def parse_size(s: str | int | float) -> int:
    """Bytes for "500GB", "1.5TB", "10GiB", "512M", 1024 or "0"; ValueError otherwise."""
    if isinstance(s, bool):
        raise ValueError(f"{s!r} is not a size: {HINT}")
    if isinstance(s, int):
        if s < 0:
            raise ValueError(f"size {s} is negative: {HINT}")
        return s
    if isinstance(s, float):
        if not math.isfinite(s) or s < 0:
            raise ValueError(f"size {s} is not a non-negative number: {HINT}")
        return int(Decimal(repr(s)).to_integral_value(ROUND_HALF_UP))
    if not isinstance(s, str):
        raise ValueError(f"{s!r} is not a size ({type(s).__name__}): {HINT}")
    if s.strip().startswith("-"):
        raise ValueError(f"size {s!r} is negative: {HINT}")
    m = _SIZE.match(s)
    mult = _multiplier(m.group(2)) if m else None
    if m is None or mult is None:
        raise ValueError(f"{s!r} is not a size: {HINT}")
    try:
        value = Decimal(m.group(1)) * mult
    except InvalidOperation as e:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{s!r} is not a size: {HINT}") from e
    return int(value.to_integral_value(ROUND_HALF_UP))


_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")


def format_bytes(n: int | float) -> str:
    """SI with one decimal: 0 B, 512 B, 1.5 KB, 412.3 GB, 1.2 TB."""
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    if v < 1000:
        return f"{sign}{int(round(v))} B"
    i = 0
    while v >= 999.95 and i < len(_UNITS) - 1:
        v /= 1000
        i += 1
    return f"{sign}{v:.1f} {_UNITS[i]}"
