"""What other phases will take of the resources a phase's checks look at: free space on a
filesystem, memory on a GPU. A check alone sees only the free bytes of this moment, so two
phases that each fit would start together on a disk that holds one of them. A walk that starts
phases together (`eagle3 run --all --parallel N`) hands each start the claims of the phases
starting beside it and of those already running, and `free_space`, `shm_free` and
`gpu_free_memory` judge the sum.

A claim on space is what a phase will still write: its `free_space` need while it starts, and
once it runs what its events say remains (or its need less what it has written). A claim on a
GPU is a `gpu_free_memory` need of a phase starting beside it (a running phase's memory is in
the driver's `memory_used` already), or the `--gpu-memory-share` its command carries, which
caps its allocator at that fraction of each GPU it sees, running or not."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from console.core.telemetry.disk import nearest_existing
from pipeline.sizes import format_bytes

SHARE_FLAG = "--gpu-memory-share"
_INDEX_LIST = re.compile(r"^\s*\d+(\s*,\s*\d+)*\s*$")


@dataclass(frozen=True)
class SpaceClaim:
    phase: str
    device: int  # st_dev of the filesystem it writes on
    bytes: int
    running: bool  # already running (what it still has to write), else starting beside


@dataclass(frozen=True)
class GpuClaim:
    phase: str
    gpus: tuple[int, ...] | None  # None: every GPU it can see
    bytes: int | None = None  # a gpu_free_memory need, per GPU
    share: float | None = None  # the --gpu-memory-share of its command
    running: bool = False

    def on(self, index: int) -> bool:
        return self.gpus is None or index in self.gpus

    def bytes_of(self, total: int | None) -> int:
        """What it takes of a GPU of `total` bytes: its share of it, else its need."""
        if self.share is not None and total is not None:
            return int(self.share * total)
        return self.bytes or 0


@dataclass(frozen=True)
class Sharing:
    """The claims of the other phases, as a start's checks see them."""

    space: tuple[SpaceClaim, ...] = ()
    gpu: tuple[GpuClaim, ...] = ()

    def space_on(self, device: int) -> list[SpaceClaim]:
        return [c for c in self.space if c.device == device]

    def starting_on(self, index: int) -> list[GpuClaim]:
        """The claims on GPU `index` of phases starting beside this one; a running phase's
        memory is in the driver's `memory_used` already."""
        return [c for c in self.gpu if c.on(index) and not c.running]

    def shares_with(self, gpus: tuple[int, ...] | None) -> list[GpuClaim]:
        """The claims by share on any GPU of `gpus` (None: all)."""
        return [c for c in self.gpu if c.share is not None
                and (gpus is None or c.gpus is None or set(gpus) & set(c.gpus))]


def whose(claims: Sequence[SpaceClaim | GpuClaim]) -> str:
    """`extract (starting beside it), train (running)`."""
    return ", ".join(f"{c.phase} ({'running' if c.running else 'starting beside it'})" for c in claims)


def others_line(claims: Sequence[SpaceClaim], need: int) -> str:
    """`plus 2.0 GB for extract (starting beside it): 3.0 GB in all`, or nothing."""
    if not claims:
        return ""
    taken = sum(c.bytes for c in claims)
    return f", plus {format_bytes(taken)} for {whose(claims)}: {format_bytes(need + taken)} in all"


def shares_fit(share: float, gpus: tuple[int, ...] | None, sharing: Sharing) -> tuple[bool, str, dict] | None:
    """Whether this phase's `--gpu-memory-share` and those of the phases beside it on the same
    GPUs add up to one GPU at most: (ok, message, evidence), or None when no other claims one."""
    others = sharing.shares_with(gpus)
    if not others:
        return None
    total = share + sum(c.share or 0.0 for c in others)
    ev = {"share": share, "others": {c.phase: c.share for c in others}, "total": round(total, 4)}
    said = f"--gpu-memory-share {share:g} beside {whose(others)} with " + ", ".join(
        f"{c.share:g}" for c in others) + f": {total:.3g} of a GPU"
    return total <= 1.0 + 1e-9, said + ("" if total <= 1.0 + 1e-9 else "; lower the shares or run fewer at once"), ev


def device_of(path: str | os.PathLike[str]) -> int | None:
    """The filesystem `path` is on, or will be on once made (its nearest existing folder's)."""
    found = nearest_existing(Path(path))
    try:
        return os.stat(found).st_dev if found is not None else None
    except OSError:
        return None


def share_of(argv: Iterable[str]) -> float | None:
    """The `--gpu-memory-share F` (or `=F`) a command carries; None when it carries none or a
    value that is not a number (the stage refuses it itself)."""
    items = list(argv)
    for i, item in enumerate(items):
        value = None
        if item == SHARE_FLAG and i + 1 < len(items):
            value = items[i + 1]
        elif item.startswith(SHARE_FLAG + "="):
            value = item.split("=", 1)[1]
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def visible_gpus(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """The GPUs a phase's `CUDA_VISIBLE_DEVICES` names (indexes only); None: all of them."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or not _INDEX_LIST.match(value):
        return None
    return tuple(int(x) for x in value.split(","))
