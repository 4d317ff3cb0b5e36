"""How many threads a stage's torch runs its CPU work on: the cores it may use, not torch's
default (every core the kernel reports, whatever the container's quota or the other work).

Intra-op threads meet at a barrier after every operation, so one that waits for a core holds
the others: on a loaded 2-core box one cached decode step took 769 ms on torch's 2 threads and
105 ms on 1. The choice, for a stage that starts torch, in this order:
  - `--threads N`, else OMP_NUM_THREADS from its environment (a config's `env:`; `eagle3 run
    --parallel` sets each phase's share there when the config sets none);
  - else the cores of its CPU affinity, capped by the cgroup's CPU quota (v2 `cpu.max`, v1
    `cpu.cfs_quota_us`), shared among the ranks torchrun starts on the host, less the cores
    other work keeps busy while it starts (0.2 s of /proc/stat on those cores); at least 1.

Stdlib only: the console computes the --parallel share with it and never loads torch."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Collection, Mapping
from pathlib import Path

MAX_THREADS = 1024
SAMPLE_S = 0.2
CGROUP = Path("/sys/fs/cgroup")


def quota_cores(cgroup_root: Path = CGROUP, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup, in cores (1.5 for `150000 100000`), or None
    where none is set or none is readable."""
    try:
        lines = proc_cgroup.read_text(encoding="utf-8", errors="replace")[:65536].splitlines()
    except OSError:
        return None
    found: list[float] = []
    files: tuple[str, ...]
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        names = controllers.split(",")
        if controllers == "":
            dirs, files = [cgroup_root], ("cpu.max",)
        elif "cpu" in names:
            dirs, files = [cgroup_root / controllers, cgroup_root / "cpu"], ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        for base in dirs:
            for folder in {base / path.lstrip("/"), base}:  # the container's own root, seen from inside
                cores = _read_quota(folder, files)
                if cores is not None:
                    found.append(cores)
    return min(found) if found else None


def _read_quota(folder: Path, files: tuple[str, ...]) -> float | None:
    try:
        words = " ".join((folder / f).read_text(encoding="ascii", errors="replace")[:256] for f in files).split()
        quota, period = words[0], words[1]
        return None if quota in ("max", "-1") else int(quota) / int(period) if int(period) > 0 else None
    except (OSError, ValueError, IndexError):
        return None


def _busy_jiffies(cpus: Collection[int], stat: Path) -> tuple[int, int]:
    """(busy, all) jiffies of `cpus` so far, from /proc/stat's per-CPU lines."""
    busy = total = 0
    for line in stat.read_text(encoding="ascii", errors="replace")[:1 << 20].splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def others_busy(cpus: Collection[int], stat: Path = Path("/proc/stat"), sample_s: float = SAMPLE_S) -> float:
    """Cores of `cpus` other processes keep busy, over `sample_s` seconds (0 where unreadable)."""
    try:
        busy0, total0 = _busy_jiffies(cpus, stat)
        own0 = time.process_time()
        time.sleep(sample_s)  # wait-ok: the sample is the point
        busy1, total1 = _busy_jiffies(cpus, stat)
        own = time.process_time() - own0
    except (OSError, ValueError):
        return 0.0
    if total1 <= total0:
        return 0.0
    share = (busy1 - busy0) / (total1 - total0) * len(cpus)
    return max(0.0, share - own / sample_s)


def usable_cores() -> int:
    """The cores this process may run on: its affinity, capped by its cgroup quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = quota_cores()
    return max(1, min(cores, math.floor(quota)) if quota is not None else cores)


def _int(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return 0


def choose(asked: int | None, env: Mapping[str, str] = os.environ) -> tuple[int, str]:
    """The thread count, and why (for the stage's log; "" where the operator set it)."""
    if asked is not None:
        return asked, ""
    pinned = _int(env.get("OMP_NUM_THREADS"))
    if 1 <= pinned <= MAX_THREADS:
        return pinned, ""
    ranks = max(1, _int(env.get("LOCAL_WORLD_SIZE")))  # torchrun's ranks on this host share it
    cores = usable_cores()
    mine = max(1, cores // ranks)
    if ranks > 1 or mine == 1 or not hasattr(os, "sched_getaffinity"):
        return mine, f"{cores} cores" + (f" shared by {ranks} ranks" if ranks > 1 else "")
    cpus = os.sched_getaffinity(0)
    busy = others_busy(cpus)
    threads = max(1, min(mine, math.floor(len(cpus) - busy + 0.5)))
    return threads, f"{mine} cores, {busy:.1f} of them busy with other work"


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=_threads, default=None, metavar="N",
                        help="torch's CPU threads (default: OMP_NUM_THREADS, else the cores this process may use "
                             "less those other work keeps busy)")


def _threads(text: str) -> int:
    n = _int(text)
    if not 1 <= n <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"--threads takes 1 to {MAX_THREADS}, got {text!r}")
    return n


def fit(stage: str, asked: int | None) -> int:
    """Set the stage's torch threads (before torch loads, through OMP_NUM_THREADS, which its
    children inherit too; once loaded, through torch) and say so when the stage chose them."""
    threads, why = choose(asked)
    torch = sys.modules.get("torch")
    if torch is None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    else:
        torch.set_num_threads(threads)
    if why:
        print(f"{stage}: torch on {threads} CPU thread{'s' if threads > 1 else ''} ({why}; --threads N sets it)",
              flush=True)  # stdout: stderr is the one line of an error
    return threads
