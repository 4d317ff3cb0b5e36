"""NvmlGpuSource against a real driver; skipped on machines without one (CI).

A stand-in phase (a setsid'ed launcher whose child holds 1 GiB on the GPU and keeps it busy)
must show up on the GPU panel's data with its memory, load and owning phase.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.util import find_spec

import pytest

from console.core.telemetry.nvml import NvmlGpuSource
from console.core.telemetry.ownership import phase_of_pid

WORKER = r"""
import sys, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
open(sys.argv[1], "w").write("ready")
end = time.time() + 60
while time.time() < end:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""
LAUNCHER = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]])"


@pytest.fixture(scope="module")
def source():
    src = NvmlGpuSource()
    reading = src.read()
    if reading.error:
        pytest.skip(reading.error)
    yield src
    src.close()


def test_every_gpu_field_reads_on_real_hardware(source):
    r = source.read()
    assert r.driver and r.gpus
    for g in r.gpus:
        assert g.name and g.uuid and g.uuid.startswith(("GPU-", "MIG-"))
        assert g.memory_total > 0 and 0 <= g.memory_used <= g.memory_total
        assert 0 <= g.utilization <= 100
        assert 0 < g.temperature < 120
        assert g.power > 0 and 0 < g.power_limit < 2000  # watts, not milliwatts
        assert g.processes_unknown is False


def test_a_phase_process_on_the_gpu_is_seen_busy_and_attributed(source, tmp_path):
    if find_spec("torch") is None:
        pytest.skip("torch is not installed here")
    flag = tmp_path / "ready"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, WORKER, str(flag)], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert launcher.poll() is None, "the GPU worker died"
            assert time.monotonic() < deadline
            time.sleep(0.2)  # wait-ok: poll interval of a deadline loop
        utils, found = [], None
        end = time.monotonic() + 15
        while time.monotonic() < end and (found is None or len(utils) < 10):
            r = source.read()
            utils.append(max(g.utilization or 0 for g in r.gpus))
            procs = [p for g in r.gpus for p in g.processes]
            mine = [p for p in procs if phase_of_pid(p.pid, {launcher.pid: "extract"}) == "extract"]
            if mine:
                found = mine[0]
            elif procs and found is None and time.monotonic() > end - 5:
                pytest.skip(f"NVML reports pids {[p.pid for p in procs]} from another PID namespace")
            time.sleep(0.5)  # wait-ok: poll interval
        assert max(utils) > 0
        assert found is not None, "the phase's GPU process never appeared"
        assert os.getsid(found.pid) == launcher.pid
        assert found.used_memory is None or found.used_memory >= 1 << 30
    finally:
        os.killpg(launcher.pid, 9)
        launcher.wait()
