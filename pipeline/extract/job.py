"""Everything decided before the target is loaded: inputs validated, store opened, plan made.

This half needs no torch, so bad input (a wrong path, a torn dataset, a store built from
another target, a full disk, a store another run is writing) is refused in a second, before
minutes of weight loading.

Resume trusts the manifest, but not blindly: every listed sample of this rank must have its
file at the manifest's size (one stat each), and the last 64 written must match their xxh3
checksums (pipeline/store/integrity.py, resume_damage). A sample that fails is dropped from
`done`, named in `Job.damaged`, and extracted again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.extract.batching import PlannedBatch, plan_batches
from pipeline.extract.estimate import read_stats
from pipeline.extract.options import Options
from pipeline.extract.reserve import DiskGuard
from pipeline.extract.sharding import Shard
from pipeline.merged_dataset import DatasetIndex, index_dataset
from pipeline.program_edge import BadInput, StageError
from pipeline.store.integrity import RESUME_CHECKSUMS, resume_damage
from pipeline.store.layout import sample_bytes
from pipeline.store.lock import StoreLock
from pipeline.store.manifest import manifest_in_order
from pipeline.store.meta import TargetInfo, build_meta, ensure_meta
from pipeline.target.tokenizer import check_merged_with


@dataclass
class Job:
    options: Options
    target: TargetInfo
    dtype: str
    shard: Shard
    dataset: DatasetIndex
    total: int  # samples of the whole run (all ranks), after --limit
    layers: list[int]
    meta: dict
    done: dict[int, dict]
    batches: list[PlannedBatch]  # this rank's plan, whole (done batches included)
    guard: DiskGuard
    todo: list[PlannedBatch] = field(default_factory=list)
    damaged: dict[int, str] = field(default_factory=dict)  # listed in the manifest, failed the resume check
    lock: StoreLock | None = None  # held until the process ends (or release())

    @property
    def out(self) -> Path:
        assert self.options.out is not None  # validate(): an extraction run needs --out
        return self.options.out

    def write_positions(self, batch: PlannedBatch) -> list[int]:
        return [p for p, i in enumerate(batch.indices) if i not in self.done]

    def bytes_of(self, tokens: int) -> int:
        return sample_bytes(tokens, self.target.hidden_size, self.dtype, self.options.fp8)

    @property
    def rank_todo_samples(self) -> int:
        return sum(len(self.write_positions(b)) for b in self.todo)


def prepare(options: Options, target: TargetInfo, dtype: str, shard: Shard) -> Job:
    """The store opened for `options` (validated by the caller: --data and --out given, every bound held)."""
    assert options.data is not None and options.out is not None
    data, out = Path(options.data), Path(options.out)
    layers = target.capture_layers
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create the output folder {out} (--out): {e.strerror}") from None
    lock = StoreLock(out, shard.rank, shard.world_size).acquire()
    try:
        return _prepare_locked(options, target, dtype, shard, data, out, layers, lock)
    except BaseException:
        lock.release()
        raise


def _prepare_locked(options: Options, target: TargetInfo, dtype: str, shard: Shard, data: Path, out: Path,
                    layers: list[int], lock: StoreLock) -> Job:
    guard = DiskGuard(out, options.reserve)
    guard.check(0)
    dataset = index_dataset(data, options.max_len, target.vocab_size)
    if options.stats is not None:
        recorded = read_stats(options.stats)
        if recorded.dataset_sha256 != dataset.sha256:
            raise BadInput(
                f"{options.stats}: dataset_sha256 is {recorded.dataset_sha256} but {data} hashes to "
                f"{dataset.sha256}; the stats belong to another dataset: rerun pipeline.merge or pass the matching "
                "--stats"
            )
        check_merged_with(recorded, options.stats, dataset.path, target.path, "--model",
                          "extract without --stats (nothing is then checked against merge's record)")
    meta = build_meta(target, dtype, dataset.path, dataset.sha256, len(dataset), options.max_len, shard.world_size,
                      options.limit, fp8=options.fp8)
    ensure_meta(out, meta, shard.rank)
    total = len(dataset) if options.limit is None else min(options.limit, len(dataset))
    mine = list(shard.indices(total))
    try:
        entries = manifest_in_order(out)
        done = {e["index"]: e for e in entries}
        mine_set = set(mine)
        damaged = resume_damage(out, [e for e in entries if e["index"] in mine_set], last=RESUME_CHECKSUMS)
    except OSError as e:
        raise StageError(f"cannot read the manifest in {out}: {e}") from None
    for i in damaged:
        done.pop(i, None)
    batches = plan_batches(mine, dataset.lengths, options.batch_tokens, options.window)
    job = Job(options=options, target=target, dtype=dtype, shard=shard, dataset=dataset, total=total,
              layers=layers, meta=meta, done=done, batches=batches, guard=guard, damaged=damaged, lock=lock)
    job.todo = [b for b in batches if job.write_positions(b)]
    return job
