"""Deterministic stand-ins for the telemetry sources, for UI tests, snapshots and benches.

Every value is a pure function of (seed, index, t), so a snapshot taken with a fixed `t`
is byte-stable, and a sequence of reads at advancing `t` moves like a real machine.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from console.core.telemetry.samples import (
    DiskReading,
    GpuProcess,
    GpuReading,
    GpuSample,
    HostReading,
    ShmReading,
    VolumeSample,
)

GiB = 1 << 30
_H200_MEMORY = 143_771 * (1 << 20)  # what nvidia-smi shows for an H200


def _wave(seed: int, index: int, t: float, period: float) -> float:
    """A smooth value in [0, 1] that differs per seed and index."""
    phase = (seed * 7919 + index * 104729) % 1000 / 1000.0 * 2 * math.pi
    return 0.5 + 0.5 * math.sin(2 * math.pi * t / period + phase)


class FakeGpuSource:
    """Drop-in for `NvmlGpuSource` (same `read()`/`close()` contract).

    `n` GPUs named like an H200; indexes in `failing` return a sample whose every field is
    None and `processes_unknown=True` (a GPU whose queries all fail). `error` set: every read
    is the no-driver reading with that message. `processes` maps a GPU index to the pids
    shown on it (default: none, so ownership lookups stay inside the test's control).
    `read(t=None)` uses `t` when given (snapshots) and the wall clock otherwise.
    """

    def __init__(
        self,
        n: int = 8,
        failing: Sequence[int] = (3,),
        seed: int = 0,
        error: str | None = None,
        processes: Mapping[int, Sequence[int]] | None = None,
        name: str = "NVIDIA H200",
        driver: str = "570.124.06",
    ) -> None:
        self.n = n
        self.failing = frozenset(failing)
        self.seed = seed
        self.error = error
        self.processes = {k: tuple(v) for k, v in (processes or {}).items()}
        self.name = name
        self.driver = driver
        self.closed = False

    def read(self, t: float | None = None) -> GpuReading:
        t = time.time() if t is None else t
        if self.error is not None:
            return GpuReading(t=t, error=self.error)
        return GpuReading(t=t, gpus=tuple(self._sample(i, t) for i in range(self.n)), driver=self.driver)

    def close(self) -> None:
        self.closed = True

    def _sample(self, i: int, t: float) -> GpuSample:
        if i in self.failing:
            return GpuSample(i, None, None, None, None, None, None, None, None, (), True)
        util = round(100 * _wave(self.seed, i, t, 37.0))
        mem_frac = 0.2 + 0.7 * _wave(self.seed + 1, i, t, 300.0)
        used = int(_H200_MEMORY * mem_frac) // (1 << 20) * (1 << 20)
        pids = self.processes.get(i, ())
        return GpuSample(
            index=i,
            name=self.name,
            uuid=f"GPU-{self.seed:08x}-{i:04x}-fake",
            utilization=float(util),
            memory_used=used,
            memory_total=_H200_MEMORY,
            temperature=float(round(35 + 45 * util / 100)),
            power=float(round(90 + 610 * util / 100)),
            power_limit=700.0,
            processes=tuple(GpuProcess(pid, used // max(1, len(pids))) for pid in pids),
        )


class FakeDiskSource:
    """Drop-in for `DiskSource`: each volume fills linearly at `rate` bytes/s from `used` at
    `t0` (the first read's t when not given), capped at `total`. `rate` may be one number or
    one per volume; a path listed in `errors` reads as unreadable with that message."""

    def __init__(
        self,
        volumes: Sequence[str | Path] = ("/data", "/dev/shm"),
        total: int = 2048 * GiB,
        used: int = 1024 * GiB,
        rate: float | Sequence[float] = 200 * (1 << 20),
        t0: float | None = None,
        errors: Mapping[str, str] | None = None,
    ) -> None:
        self.volumes = [str(v) for v in volumes]
        self.total = total
        self.used = used
        self.rates = [float(rate)] * len(self.volumes) if isinstance(rate, (int, float)) else [float(r) for r in rate]
        self.t0 = t0
        self.errors = dict(errors or {})
        self._lock = threading.Lock()

    def read(self, t: float | None = None) -> DiskReading:
        t = time.time() if t is None else t
        with self._lock:
            if self.t0 is None:
                self.t0 = t
            t0 = self.t0
        vols = []
        for path, rate in zip(self.volumes, self.rates):
            if path in self.errors:
                vols.append(VolumeSample(path, None, None, None, error=self.errors[path]))
                continue
            used = int(min(self.total, max(0.0, self.used + rate * (t - t0))))
            vols.append(VolumeSample(path, self.total, used, self.total - used))
        return DiskReading(t=t, volumes=tuple(vols))


class FakeShmSource:
    """Drop-in for `ShmSource`: /dev/shm with a dump folder that gains `files_per_s` files of
    `file_bytes` each from `t0` (the first read's t when not given)."""

    def __init__(
        self,
        total: int = 512 * GiB,
        used: int = 64 * GiB,
        dump: str | None = "/dev/shm/eagle3",
        files_per_s: float = 50.0,
        file_bytes: int = 8 << 20,
        t0: float | None = None,
    ) -> None:
        self.total = total
        self.used = used
        self.dump = dump
        self.files_per_s = files_per_s
        self.file_bytes = file_bytes
        self.t0 = t0
        self._lock = threading.Lock()

    def read(self, t: float | None = None) -> ShmReading:
        t = time.time() if t is None else t
        with self._lock:
            if self.t0 is None:
                self.t0 = t
            t0 = self.t0
        files = int(max(0.0, t - t0) * self.files_per_s) if self.dump else None
        dump_bytes = files * self.file_bytes if files is not None else None
        used = min(self.total, self.used + (dump_bytes or 0))
        return ShmReading(
            t=t,
            total=self.total,
            used=used,
            free=self.total - used,
            dump_path=self.dump,
            dump_files=files,
            dump_bytes=dump_bytes,
        )


class FakeHostSource:
    """Drop-in for `HostSource`: CPU and memory move smoothly with t."""

    def __init__(self, cpus: int = 128, mem_total: int = 2048 * GiB, seed: int = 0) -> None:
        self.cpus = cpus
        self.mem_total = mem_total
        self.seed = seed

    def read(self, t: float | None = None) -> HostReading:
        t = time.time() if t is None else t
        cpu = round(100 * _wave(self.seed, 0, t, 23.0), 1)
        mem = int(self.mem_total * (0.25 + 0.5 * _wave(self.seed, 1, t, 600.0)))
        load1 = round(self.cpus * cpu / 100, 2)
        return HostReading(
            t=t,
            cpu_percent=cpu,
            mem_used=mem,
            mem_total=self.mem_total,
            load=(load1, round(load1 * 0.9, 2), round(load1 * 0.8, 2)),
            cpu_count=self.cpus,
        )
