"""Plain readings the sources produce and the panels draw. None means N/A: a query
that failed, never a crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar

R_co = TypeVar("R_co", covariant=True)


class Source(Protocol[R_co]):
    """What a panel polls: NVML, the volumes, /dev/shm, the host, or a fake of any of them
    (`telemetry/fake.py`). A read never raises for a failed query: it says so in the reading."""

    def read(self) -> R_co: ...


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory: int | None  # bytes


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str | None
    uuid: str | None
    utilization: float | None  # percent 0..100
    memory_used: int | None  # bytes
    memory_total: int | None
    temperature: float | None  # Celsius
    power: float | None  # watts
    power_limit: float | None  # watts
    processes: tuple[GpuProcess, ...] = ()
    processes_unknown: bool = False  # both process queries failed: "N/A", not "none"


@dataclass(frozen=True)
class GpuReading:
    """One poll of every GPU. `error` set (and gpus empty) when there is no driver."""

    t: float
    gpus: tuple[GpuSample, ...] = ()
    error: str | None = None
    driver: str | None = None


@dataclass(frozen=True)
class VolumeSample:
    path: str
    total: int | None
    used: int | None
    free: int | None
    error: str | None = None
    measured_path: str | None = None  # nearest existing parent when `path` does not exist yet


@dataclass(frozen=True)
class DiskReading:
    t: float
    volumes: tuple[VolumeSample, ...] = ()


@dataclass(frozen=True)
class ShmReading:
    t: float
    total: int | None
    used: int | None
    free: int | None
    dump_path: str | None = None
    dump_files: int | None = None
    dump_bytes: int | None = None
    error: str | None = None
    dump_truncated: bool = False  # the scan stopped at its entry budget: counts are lower bounds
    dump_error: str | None = None


@dataclass(frozen=True)
class HostReading:
    t: float
    cpu_percent: float | None
    mem_used: int | None
    mem_total: int | None
    load: tuple[float, float, float] | None = None
    extra: dict[str, float] = field(default_factory=dict)
    cpu_count: int | None = None
