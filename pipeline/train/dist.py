"""This process's place in a torchrun job (or a job of one), read from the environment.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every worker,
on one node or many (--nnodes, --rdzv-*), so `env://` initialisation is all a rank needs.
NCCL on CUDA, gloo on CPU. A job of one never initialises a process group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from pipeline.train.errors import BadInput


def _env_int(key: str, default: int) -> int:
    v = os.environ.get(key, "")
    if v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise BadInput(f"environment variable {key}={v!r} is not an integer") from None


@dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @classmethod
    def from_env(cls, requested: str | None = None) -> Dist:
        rank, world, local = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)
        if world < 1 or not 0 <= rank < world:
            raise BadInput(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
        want = requested or ("cuda" if torch.cuda.is_available() else "cpu")
        if want.startswith("cuda"):
            if not torch.cuda.is_available():
                raise BadInput("--device cuda: no CUDA GPU is visible to this process; use --device cpu")
            device = torch.device(want if ":" in want else f"cuda:{local}")
            torch.cuda.set_device(device)
        elif want == "cpu":
            device = torch.device("cpu")
        else:
            raise BadInput(f"--device {want!r}: use cpu or cuda")
        if world > 1:
            tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", init_method="env://",
                                     rank=rank, world_size=world, device_id=device if device.type == "cuda" else None)
        return cls(rank=rank, world_size=world, local_rank=local, device=device)

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.world_size == 1:
            return module
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        # buffers (frozen embeddings, d2t/t2d) are identical on every rank: no per-step broadcast
        return DistributedDataParallel(module.to(self.device), device_ids=ids, broadcast_buffers=False)

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        t = t.to(self.device)
        tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
        return t

    def ranks_agree(self, value: torch.Tensor) -> bool:
        """Whether every rank holds the same scalar (a weights checksum)."""
        if self.world_size == 1:
            return True
        both = torch.stack([value, -value]).to(self.device)
        tdist.all_reduce(both, op=tdist.ReduceOp.MAX)
        return bool(both[0] == -both[1])

    def barrier(self) -> None:
        if self.world_size > 1:
            tdist.barrier()

    def close(self) -> None:
        if self.world_size > 1 and tdist.is_initialized():
            tdist.destroy_process_group()
