"""NvmlGpuSource against a fake pynvml: a broken GPU or a missing driver never raises."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

from console.core.telemetry.nvml import NvmlGpuSource


class NVMLError(Exception):
    pass


def fake_pynvml(n: int = 3, broken: tuple[int, ...] = (1,), init_error: str | None = None) -> types.ModuleType:
    """A module with pynvml's API: GPU indexes in `broken` raise NVMLError on every query."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_TEMPERATURE_GPU = 0
    m.calls = {"init": 0, "shutdown": 0, "handle": 0}
    m.init_error = init_error

    def init():
        m.calls["init"] += 1
        if m.init_error:
            raise NVMLError(m.init_error)

    def handle(i):
        m.calls["handle"] += 1
        return SimpleNamespace(index=i)

    def q(fn):
        def wrapped(h, *args):
            if h.index in broken:
                raise NVMLError("GPU is lost")
            return fn(h, *args)
        return wrapped

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.__setitem__("shutdown", m.calls["shutdown"] + 1)
    m.nvmlDeviceGetCount = lambda: n
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlSystemGetDriverVersion = lambda: "570.1"
    m.nvmlDeviceGetName = q(lambda h: b"NVIDIA H200")
    m.nvmlDeviceGetUUID = q(lambda h: f"GPU-{h.index}")
    m.nvmlDeviceGetUtilizationRates = q(lambda h: SimpleNamespace(gpu=10 * (h.index + 1), memory=5))
    m.nvmlDeviceGetMemoryInfo = q(lambda h: SimpleNamespace(used=(h.index + 1) << 30, total=80 << 30, free=0))
    m.nvmlDeviceGetTemperature = q(lambda h, sensor: 40 + h.index)
    m.nvmlDeviceGetPowerUsage = q(lambda h: 350_500)
    m.nvmlDeviceGetEnforcedPowerLimit = q(lambda h: 700_000)
    m.nvmlDeviceGetComputeRunningProcesses = q(
        lambda h: [SimpleNamespace(pid=100 + h.index, usedGpuMemory=1 << 30), SimpleNamespace(pid=7, usedGpuMemory=2**64 - 1)]
    )
    m.nvmlDeviceGetGraphicsRunningProcesses = q(lambda h: [SimpleNamespace(pid=100 + h.index, usedGpuMemory=2 << 30)])
    return m


def test_reads_every_gpu_in_panel_units():
    src = NvmlGpuSource(nvml=fake_pynvml(n=3, broken=()))
    r = src.read()
    assert r.error is None and r.driver == "570.1"
    g = r.gpus[2]
    assert (g.index, g.name, g.uuid) == (2, "NVIDIA H200", "GPU-2")
    assert g.utilization == 30.0
    assert (g.memory_used, g.memory_total) == (3 << 30, 80 << 30)
    assert g.temperature == 42.0
    assert (g.power, g.power_limit) == (350.5, 700.0)  # milliwatts -> watts
    # compute and graphics lists merged by pid; NVML's "not available" memory reads as None
    assert [(p.pid, p.used_memory) for p in g.processes] == [(7, None), (102, 2 << 30)]
    assert g.processes_unknown is False


def test_failing_gpu_gives_none_fields_and_others_still_read(monkeypatch):
    fake = fake_pynvml(n=3, broken=(1,))
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # the real import path, not injection
    src = NvmlGpuSource()
    r = src.read()
    assert r.error is None and len(r.gpus) == 3
    bad = r.gpus[1]
    assert bad.index == 1
    assert [bad.name, bad.uuid, bad.utilization, bad.memory_used, bad.memory_total,
            bad.temperature, bad.power, bad.power_limit] == [None] * 8
    assert bad.processes == () and bad.processes_unknown is True
    assert r.gpus[0].utilization == 10.0 and r.gpus[2].utilization == 30.0


def test_memory_used_leaves_out_driver_reserved_memory_when_the_driver_can_say():
    fake = fake_pynvml(n=1, broken=())
    fake.nvmlMemory_v2 = 0x02000028

    def info(h, version=None):
        if version == fake.nvmlMemory_v2:
            return SimpleNamespace(total=80 << 30, reserved=600 << 20, used=0, free=(80 << 30) - (600 << 20))
        return SimpleNamespace(total=80 << 30, used=600 << 20, free=0)

    fake.nvmlDeviceGetMemoryInfo = info
    assert NvmlGpuSource(nvml=fake).read().gpus[0].memory_used == 0  # idle GPU reads idle

    def v1_only(h, version=None):
        if version is not None:
            raise NVMLError("Function Not Found")  # an older driver
        return info(h)

    fake.nvmlDeviceGetMemoryInfo = v1_only
    src = NvmlGpuSource(nvml=fake)
    assert [src.read().gpus[0].memory_used for _ in range(2)] == [600 << 20, 600 << 20]


def test_handles_are_cached_between_reads():
    fake = fake_pynvml(n=2, broken=())
    src = NvmlGpuSource(nvml=fake)
    for _ in range(5):
        src.read()
    assert fake.calls == {"init": 1, "shutdown": 0, "handle": 2}


def test_no_driver_is_one_clear_line_and_init_retries_at_most_every_30s():
    fake = fake_pynvml(init_error="Driver Not Loaded")
    now = [1000.0]
    src = NvmlGpuSource(nvml=fake, monotonic=lambda: now[0], clock=lambda: now[0])
    r = src.read()
    assert r.gpus == ()
    assert r.error == "NVIDIA driver not found (libnvidia-ml.so.1): Driver Not Loaded"
    now[0] += 10
    r2 = src.read()
    assert r2.error == r.error and r2.t == 1010.0
    assert fake.calls["init"] == 1  # not retried within 30 s
    fake.init_error = None  # driver loaded meanwhile
    now[0] += 21
    r3 = src.read()
    assert fake.calls["init"] == 2
    assert r3.error is None and len(r3.gpus) == 3


def test_missing_package_is_reported_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    r = NvmlGpuSource().read()
    assert r.gpus == () and "nvidia-ml-py is not installed" in r.error


def test_a_query_raising_something_other_than_nvmlerror_is_still_na():
    fake = fake_pynvml(n=1, broken=())
    fake.nvmlDeviceGetTemperature = lambda h, s: (_ for _ in ()).throw(KeyError("odd"))
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: (_ for _ in ()).throw(NVMLError("x"))
    g = NvmlGpuSource(nvml=fake).read().gpus[0]
    assert g.temperature is None and g.utilization == 10.0
    assert [p.pid for p in g.processes] == [100]  # graphics list still answered


def test_close_shuts_down_and_next_read_reinitialises():
    fake = fake_pynvml(n=1, broken=())
    src = NvmlGpuSource(nvml=fake)
    src.read()
    src.close()
    assert fake.calls["shutdown"] == 1
    assert src.read().gpus[0].utilization == 10.0
    assert fake.calls["init"] == 2


def test_machine_with_driver_but_no_gpus():
    r = NvmlGpuSource(nvml=fake_pynvml(n=0)).read()
    assert r.error is None and r.gpus == ()
