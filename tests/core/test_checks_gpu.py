from __future__ import annotations

from pathlib import Path

import pytest

from console.core.checks.context import CheckContext
from console.core.checks.registry import default_name, run_checks, validate
from console.core.model.config import CheckSpec, Config
from console.core.telemetry.samples import GpuProcess, GpuReading, GpuSample

GB = 10**9


def gpu(index, used_gb, total_gb=80, util=0.0, pids=(), processes_unknown=False):
    return GpuSample(index=index, name="H100", uuid=f"GPU-{index}", utilization=util,
                     memory_used=int(used_gb * GB) if used_gb is not None else None,
                     memory_total=total_gb * GB, temperature=40.0, power=100.0, power_limit=700.0,
                     processes=tuple(GpuProcess(pid=p, used_memory=GB) for p in pids),
                     processes_unknown=processes_unknown)


def ctx_with(root: Path, *gpus: GpuSample, error: str | None = None) -> CheckContext:
    cfg = Config(path=root / "eagle3.yaml", name="t", vars={}, state_dir=root / "state", volumes=(),
                 phases=(), fingerprint="f")
    reads = []

    def reader():
        reads.append(1)
        return GpuReading(t=0.0, gpus=tuple(gpus), error=error, driver="550.54")

    ctx = CheckContext(cfg, gpu_reader=reader)
    ctx.reads = reads  # type: ignore[attr-defined]
    return ctx


def check(kind, arg, ctx):
    assert validate(kind, arg) is None
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


def test_gpu_free_memory_passes_naming_the_tightest_gpu(tmp_path):
    ctx = ctx_with(tmp_path, gpu(0, 2), gpu(1, 5), gpu(2, 1))
    r = check("gpu_free_memory", {"need": "70GB"}, ctx)
    assert r.status == "pass"
    assert "GPUs 0-2" in r.message and "least: GPU 1, 75.0 GB" in r.message
    assert r.evidence["free_bytes"] == {"0": 78 * GB, "1": 75 * GB, "2": 79 * GB}


def test_gpu_free_memory_fails_listing_each_short_gpu(tmp_path):
    ctx = ctx_with(tmp_path, gpu(0, 2), gpu(1, 70), gpu(2, 75))
    r = check("gpu_free_memory", {"need": "70GB", "gpus": [1, 2]}, ctx)
    assert r.status == "fail"
    assert r.message == "need 70.0 GB per GPU: GPU 1 has 10.0 GB free; GPU 2 has 5.0 GB free"
    assert set(r.evidence["free_bytes"]) == {"1", "2"}


def test_gpu_free_memory_unknown_memory_fails(tmp_path):
    r = check("gpu_free_memory", {"need": "1GB"}, ctx_with(tmp_path, gpu(0, None)))
    assert r.status == "fail" and "GPU 0 memory N/A" in r.message


def test_listed_gpu_that_is_not_present(tmp_path):
    r = check("gpu_free_memory", {"need": "1GB", "gpus": "0,5"}, ctx_with(tmp_path, gpu(0, 1), gpu(1, 1)))
    assert r.status == "fail" and "GPU 5 not present (this host has GPU 0, 1)" in r.message


def test_no_driver_fails_both_kinds_with_the_reason(tmp_path):
    ctx = ctx_with(tmp_path, error="NVIDIA driver not found (libnvidia-ml.so.1)")
    specs = [CheckSpec("gpu_free_memory", {"need": "1GB"}, "mem"), CheckSpec("gpus_idle", None, "idle")]
    results = run_checks(specs, ctx)
    assert [r.status for r in results] == ["fail", "fail"]
    assert all("NVIDIA driver not found" in r.message for r in results)
    assert len(ctx.reads) == 1  # one NVML poll shared by every GPU check of a run


def test_gpus_idle_passes_on_quiet_gpus(tmp_path):
    r = check("gpus_idle", {"max_util": 10}, ctx_with(tmp_path, gpu(0, 0.5, util=3), gpu(1, 0.5, util=0)))
    assert r.status == "pass" and "idle" in r.message


def test_gpus_idle_fails_naming_processes_and_utilization(tmp_path):
    ctx = ctx_with(tmp_path, gpu(0, 60, util=97, pids=(4242, 4343)), gpu(1, 0.5, util=2))
    r = check("gpus_idle", {"gpus": "all"}, ctx)
    assert r.status == "fail"
    assert "GPU 0: 2 processes (pid 4242, 4343), 97% busy" in r.message
    assert "GPU 1" not in r.message
    assert r.evidence["gpus"]["0"]["pids"] == [4242, 4343]


def test_gpus_idle_memory_ceiling(tmp_path):
    ctx = ctx_with(tmp_path, gpu(0, 3, util=0))
    assert check("gpus_idle", {"max_memory": "1GB"}, ctx).status == "fail"
    assert check("gpus_idle", {"max_memory": "4GB"}, ctx).status == "pass"


def test_gpus_idle_cannot_tell_when_nothing_is_readable(tmp_path):
    ctx = ctx_with(tmp_path, gpu(0, 1, util=None, processes_unknown=True))
    r = check("gpus_idle", None, ctx)
    assert r.status == "fail" and "cannot tell" in r.message


@pytest.mark.parametrize("kind,arg,problem", [
    ("gpu_free_memory", {"need": "70GB", "gpus": [0, "x"]}, "gpus[1] must be a whole number"),
    ("gpu_free_memory", {"need": "70GB", "gpus": []}, "empty list"),
    ("gpus_idle", {"max_util": "high"}, "max_util must be a number"),
    ("gpus_idle", {"max_memory": "lots"}, "not a size"),
])
def test_bad_gpu_arguments(kind, arg, problem):
    msg = validate(kind, arg)
    assert msg is not None and problem in msg


def test_default_reader_without_nvml_fails_clearly(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError: nvidia-ml-py not installed
    cfg = Config(path=tmp_path / "eagle3.yaml", name="t", vars={}, state_dir=tmp_path / "state", volumes=(),
                 phases=(), fingerprint="f")
    r = check("gpus_idle", None, CheckContext(cfg))
    assert r.status == "fail" and "no GPU reading" in r.message and "pip install nvidia-ml-py" in r.message
