"""GPU readings from NVML (the nvidia-ml-py package, imported as `pynvml`).

A console on a box without a driver, or with one GPU fallen off the bus, must keep working:
every NVML call goes through one wrapper that turns any failure into None (drawn as N/A),
and a failed init becomes a one-line `GpuReading.error` instead of an exception.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from console.core.telemetry.samples import GpuProcess, GpuReading, GpuSample

INIT_RETRY_S = 30.0
NO_DRIVER = "NVIDIA driver not found (libnvidia-ml.so.1): {reason}"
NO_PACKAGE = "nvidia-ml-py is not installed (pip install nvidia-ml-py): {reason}"
_NOT_AVAILABLE = 1 << 63  # NVML reports "unknown" memory as 2**64-1


def _query(fn: Callable[..., Any], *args: Any) -> Any:
    """The one wrapper: any failure (NVMLError or anything else) reads as N/A."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a panel must never crash on a driver quirk
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _mem(value: Any) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return None if n < 0 or n >= _NOT_AVAILABLE else n


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else _finite(milliwatts, 1000.0)


def _finite(value: Any, scale: float = 1.0) -> float | None:
    try:
        return float(value) / scale
    except (TypeError, ValueError):
        return None


class NvmlGpuSource:
    """Reads every GPU through NVML; the GPU panel and the gpu checks call `read()`.

    Contract:
    - `read() -> GpuReading` never raises and is thread-safe (one lock; NVML calls are
      serialized). It may block for as long as the driver takes, so call it from a worker.
    - NVML is initialised lazily on the first read; the device count and handles are cached.
      A handle that could not be obtained is retried on the next read.
    - Without the package or the driver: `GpuReading(t, error="NVIDIA driver not found
      (libnvidia-ml.so.1): <reason>")` (or a "nvidia-ml-py is not installed" line), `gpus=()`.
      Init is retried at most every `retry_s` seconds; reads in between return the cached
      error with a fresh `t`.
    - Any single field that fails is None; if both process queries fail, `processes=()` and
      `processes_unknown=True`. Power is in watts, memory in bytes, temperature in Celsius;
      `memory_used` excludes the driver's reserved memory where NVML can say (as nvidia-smi).
    - `close()` shuts NVML down; a later `read()` initialises it again.

    `nvml` injects a module with pynvml's API (tests); `clock` is wall time for `t`,
    `monotonic` paces the init retries.
    """

    def __init__(
        self,
        nvml: ModuleType | None = None,
        retry_s: float = INIT_RETRY_S,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml: Any = nvml  # pynvml, or a module of its API
        self._retry_s = retry_s
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._ready = False
        self._error: str | None = None
        self._failed_at: float | None = None
        self._handles: list[Any] = []
        self._driver: str | None = None
        self._mem_v2: bool | None = None  # None: not tried yet

    def read(self) -> GpuReading:
        try:
            with self._lock:
                return self._read_locked()
        except Exception as exc:  # noqa: BLE001 - last line of defence for a panel
            return GpuReading(t=self._now(), error=f"NVML read failed: {exc}")

    def close(self) -> None:
        with self._lock:
            if self._ready and self._nvml is not None:
                _query(self._nvml.nvmlShutdown)
            self._ready = False
            self._handles = []
            self._failed_at = None
            self._error = None

    def _now(self) -> float:
        try:
            return float(self._clock())
        except Exception:  # noqa: BLE001
            return time.time()

    def _read_locked(self) -> GpuReading:
        t = self._now()
        if not self._ready:
            if self._failed_at is not None and self._monotonic() - self._failed_at < self._retry_s:
                return GpuReading(t=t, error=self._error)
            self._init()
            if not self._ready:
                return GpuReading(t=t, error=self._error)
        gpus = tuple(self._sample(i) for i in range(len(self._handles)))
        return GpuReading(t=t, gpus=gpus, driver=self._driver)

    def _init(self) -> None:
        if self._nvml is None:
            try:
                import pynvml  # noqa: PLC0415 - lazy: the console starts without it
            except Exception as exc:  # noqa: BLE001
                self._fail(NO_PACKAGE.format(reason=exc))
                return
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001
            self._fail(NO_DRIVER.format(reason=str(exc) or type(exc).__name__))
            return
        count = _query(nvml.nvmlDeviceGetCount)
        if count is None:
            _query(nvml.nvmlShutdown)
            self._fail("NVML is loaded but could not count the GPUs (nvmlDeviceGetCount failed)")
            return
        self._handles = [_query(nvml.nvmlDeviceGetHandleByIndex, i) for i in range(int(count))]
        self._driver = _text(_query(nvml.nvmlSystemGetDriverVersion))
        self._ready = True
        self._error = None
        self._failed_at = None

    def _fail(self, message: str) -> None:
        self._ready = False
        self._error = message
        self._failed_at = self._monotonic()

    def _sample(self, index: int) -> GpuSample:
        nvml = self._nvml
        assert nvml is not None
        h = self._handles[index]
        if h is None:
            h = self._handles[index] = _query(nvml.nvmlDeviceGetHandleByIndex, index)
        if h is None:
            return GpuSample(index, None, None, None, None, None, None, None, None, (), True)
        util = _query(nvml.nvmlDeviceGetUtilizationRates, h)
        mem = self._memory(h)
        temp = _query(nvml.nvmlDeviceGetTemperature, h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        processes, unknown = self._processes(h)
        return GpuSample(
            index=index,
            name=_text(_query(nvml.nvmlDeviceGetName, h)),
            uuid=_text(_query(nvml.nvmlDeviceGetUUID, h)),
            utilization=_finite(getattr(util, "gpu", None)) if util is not None else None,
            memory_used=_mem(getattr(mem, "used", None)) if mem is not None else None,
            memory_total=_mem(getattr(mem, "total", None)) if mem is not None else None,
            temperature=_finite(temp),
            power=_watts(_query(nvml.nvmlDeviceGetPowerUsage, h)),
            power_limit=_watts(_query(nvml.nvmlDeviceGetEnforcedPowerLimit, h)),
            processes=processes,
            processes_unknown=unknown,
        )

    def _memory(self, handle: Any) -> Any:
        """Memory info v2 where the driver has it: its `used` leaves out the driver's reserved
        memory, so an idle GPU reads 0 as in nvidia-smi (v1 reports ~600 MiB on an H200)."""
        nvml = self._nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None and self._mem_v2 is not False:
            mem = _query(nvml.nvmlDeviceGetMemoryInfo, handle, version)
            if mem is not None:
                self._mem_v2 = True
                return mem
            if self._mem_v2 is True:
                return None  # v2 works on this driver: this GPU is failing
        mem = _query(nvml.nvmlDeviceGetMemoryInfo, handle)
        if mem is not None and version is not None:
            self._mem_v2 = False
        return mem

    def _processes(self, handle: Any) -> tuple[tuple[GpuProcess, ...], bool]:
        nvml = self._nvml
        found: dict[int, int | None] = {}
        answered = False
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(nvml, name, None)
            procs = _query(fn, handle) if fn is not None else None
            if procs is None:
                continue
            answered = True
            for p in procs:
                pid = getattr(p, "pid", None)
                if not isinstance(pid, int):
                    continue
                used = _mem(getattr(p, "usedGpuMemory", None))
                prev = found.get(pid)
                found[pid] = used if prev is None else max(prev, used or 0)
        if not answered:
            return (), True
        return tuple(GpuProcess(pid, used) for pid, used in sorted(found.items())), False
