"""Which share of the dataset this process extracts, and on which device.

Rank r of W takes the indices i with i % W == r, so shares are balanced whatever the
order of lengths, and every rank can compute every other rank's share (which the manifest
merge relies on). Ranks share nothing but the output folder: no process group, no NCCL,
so a rank that dies leaves the others running and a rerun of that rank resumes it.
Under torchrun RANK, WORLD_SIZE and LOCAL_RANK come from the environment; by hand, pass
--rank/--world-size and each rank uses GPU `rank % device_count` unless LOCAL_RANK or
CUDA_VISIBLE_DEVICES says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.program_edge import BadInput


@dataclass(frozen=True)
class Shard:
    rank: int = 0
    world_size: int = 1
    local_rank: int | None = None

    def indices(self, total: int) -> range:
        return range(self.rank, total, self.world_size)


def _env_int(env: Mapping[str, str], key: str) -> int | None:
    v = env.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise BadInput(f"environment variable {key}={v!r} is not an integer") from None


def resolve_shard(rank: int | None, world_size: int | None, env: Mapping[str, str] | None = None) -> Shard:
    where = os.environ if env is None else env
    env_rank, env_world = _env_int(where, "RANK"), _env_int(where, "WORLD_SIZE")
    local = _env_int(where, "LOCAL_RANK")
    if rank is None and world_size is None and env_world is not None:
        rank, world_size = env_rank or 0, env_world
    if (rank is None) != (world_size is None):
        raise BadInput("--rank and --world-size go together: pass both, or neither")
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise BadInput(f"--rank {rank} --world-size {world_size}: need 0 <= rank < world-size")
    return Shard(rank=rank, world_size=world_size, local_rank=local)


def device_for(requested: str | None, shard: Shard, cuda_available: bool, device_count: int) -> str:
    if requested in (None, "auto"):
        requested = "cuda" if cuda_available else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested.startswith("cuda"):
        if not cuda_available:
            raise BadInput("--device cuda: no CUDA GPU is visible to this process; use --device cpu")
        if ":" in requested:
            return requested
        ordinal = shard.local_rank if shard.local_rank is not None else shard.rank % max(device_count, 1)
        return f"cuda:{ordinal}"
    raise BadInput(f"--device {requested!r}: use cpu or cuda")
