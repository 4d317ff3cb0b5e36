"""The HF backend of the extraction driver: this process loads the target with transformers
and runs it (engine.py). Torch-free until `run` (or, for a device other than the CPU, until
`extract` looks for it), so the driver refuses bad input before torch is imported."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from pipeline import cpu_threads
from pipeline.events import EventWriter
from pipeline.extract.driver import RunResult, drive
from pipeline.extract.job import Job
from pipeline.extract.options import Options
from pipeline.extract.sharding import Shard, device_for, resolve_shard
from pipeline.store.meta import TargetInfo


def extract(opts: Options) -> int:
    """`pipeline.extract` (--backend hf): this rank's share of the validated run, on the device
    its rank gets; raises the stage edge's errors, returns 0 when the share is done."""
    assert opts.model is not None  # validate(): an extraction run needs --model
    target = TargetInfo.from_dir(opts.model)
    shard = resolve_shard(opts.rank, opts.world_size)
    cpu_threads.fit("extract", opts.threads)
    if opts.device == "cpu":
        device = "cpu"  # no torch import before the input checks: refusals stay instant
    else:
        import torch

        device = device_for(opts.device, shard, torch.cuda.is_available(), torch.cuda.device_count())
    return drive(opts, target, HFBackend(opts.model, device, shard, compile=False if opts.no_compile else None))


class HFBackend:
    """driver.Backend for the target run in this process, on `device` (bf16 on CUDA, fp32 on CPU)."""

    def __init__(self, model_dir: Path, device: str, shard: Shard, compile: bool | None = None,
                 log: Callable[[str], None] = lambda s: print(s, flush=True)) -> None:
        self.model_dir, self.device, self.shard, self.compile, self.log = Path(model_dir), device, shard, compile, log
        self.dtype = "bfloat16" if device.startswith("cuda") else "float32"

    def plan(self, job: Job) -> int:
        return job.rank_todo_samples

    def describe(self, job: Job) -> str:
        return (f"this process: {job.rank_todo_samples} samples in {len(job.todo)} batches on {self.device} "
                f"({self.dtype})")

    def run(self, job: Job, stop: threading.Event) -> RunResult:
        import torch

        from pipeline.extract import engine
        from pipeline.target.model import load_target

        if self.device.startswith("cuda"):
            torch.cuda.set_device(self.device)
        torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[self.dtype]
        model = load_target(self.model_dir, self.device, torch_dtype)
        return engine.run(job, model, self.device, EventWriter.from_env(), log=self.log, stop=stop,
                          compile=self.compile)

    def close(self) -> None:
        """Nothing held: the model goes with the process."""
