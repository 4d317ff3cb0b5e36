"""gpu_free_memory with its need from a stage's `--estimate --json`, as an online train phase
checks it: each GPU must hold the target and the drafter, and a box without a GPU fails with a
line that says so, which an operator can override with a reason like any other check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from console.core.checks.context import CheckContext
from console.core.checks.registry import run_checks, validate
from console.core.model.config import CheckSpec, Config
from console.core.telemetry.samples import GpuReading, GpuSample

GB = 10**9
NEED = 22_596_465_868  # what `pipeline.train --estimate --json` says of SmolLM2-135M at 16,384 tokens


def estimate_arg(gpu_bytes: int = NEED) -> dict:
    """The check as a config writes it, the estimate command stood in for by one that prints its JSON."""
    printed = json.dumps({"gpu_bytes": gpu_bytes, "parts": {}, "online": True})
    return {"need": "estimate.gpu_bytes",
            "values": {"estimate": {"command": [sys.executable, "-c", f"print({printed!r})"], "timeout": 30}}}


def gpu(index: int, free_gb: float, total_gb: int = 141) -> GpuSample:
    return GpuSample(index=index, name="NVIDIA H200", uuid=f"GPU-{index}", utilization=0.0,
                     memory_used=int((total_gb - free_gb) * GB), memory_total=total_gb * GB, temperature=30.0,
                     power=80.0, power_limit=700.0)


def context(root: Path, *gpus: GpuSample, error: str | None = None, driver: str | None = "560.35") -> CheckContext:
    cfg = Config(path=root / "eagle3.yaml", name="t", vars={}, state_dir=root / "state", volumes=(), phases=(),
                 fingerprint="f")
    return CheckContext(cfg, gpu_reader=lambda: GpuReading(t=0.0, gpus=tuple(gpus), error=error, driver=driver))


def run(ctx: CheckContext, arg: dict, overrides: dict[str, str] | None = None):
    assert validate("gpu_free_memory", arg) is None
    return run_checks([CheckSpec("gpu_free_memory", arg, "gpu-room-for-target-and-drafter")], ctx,
                      overrides=overrides)[0]


def test_a_gpu_with_the_estimated_memory_free_passes_and_shows_the_estimate(tmp_path):
    r = run(context(tmp_path, gpu(0, 140)), estimate_arg())
    assert r.status == "pass", r.message
    assert r.message == "GPU 0: each has 22.6 GB free or more (least: GPU 0, 140.0 GB)"
    assert r.evidence["need_bytes"] == NEED and r.evidence["values"] == {"estimate.gpu_bytes": NEED}
    assert r.evidence["values_from"]["estimate"]["command"][0] == sys.executable
    assert r.evidence["free_bytes"] == {"0": 140 * GB}


def test_a_gpu_with_less_free_than_the_estimate_blocks_the_start_naming_both_figures(tmp_path):
    r = run(context(tmp_path, gpu(0, 100), gpu(1, 20)), estimate_arg())
    assert r.status == "fail"
    assert r.message == "need 22.6 GB per GPU: GPU 1 has 20.0 GB free"
    assert r.evidence["free_bytes"] == {"0": 100 * GB, "1": 20 * GB}


def test_no_driver_fails_saying_no_gpu_is_visible_and_an_override_with_a_reason_lets_it_start(tmp_path):
    ctx = context(tmp_path, error="NVIDIA driver not found (libnvidia-ml.so.1): NVML Shared Library Not Found",
                  driver=None)
    r = run(ctx, estimate_arg())
    assert r.status == "fail" and not r.overridden
    assert r.message == ("need 22.6 GB per GPU, but no GPU is visible: NVIDIA driver not found (libnvidia-ml.so.1): "
                         "NVML Shared Library Not Found")
    assert r.evidence["gpus_visible"] == 0 and r.evidence["need_bytes"] == NEED
    waived = run(ctx, estimate_arg(), overrides={"gpu-room-for-target-and-drafter": "CPU smoke run"})
    assert waived.status == "fail" and waived.overridden and waived.reason == "CPU smoke run"


def test_a_driver_that_lists_no_gpu_fails_the_same_way(tmp_path):
    r = run(context(tmp_path), estimate_arg())
    assert r.status == "fail"
    assert r.message == "need 22.6 GB per GPU, but no GPU is visible: the driver (560.35) lists none"
    assert r.evidence["gpus_visible"] == 0 and r.evidence["driver"] == "560.35"


def test_an_estimate_that_cannot_run_fails_naming_the_command_not_the_gpu(tmp_path):
    arg = {"need": "estimate.gpu_bytes",
           "values": {"estimate": {"command": [sys.executable, "-c", "import sys; print('no target'); sys.exit(2)"]}}}
    r = run(context(tmp_path, gpu(0, 140)), arg)
    assert r.status == "fail"
    assert r.message.startswith("cannot compute the GPU memory needed: value 'estimate': ")
    assert "exited 2: no target" in r.message
