"""Per-dump cost of moving one SGLang dump into the store, on one thread: CPU seconds and wall.

Two ways of moving the same dump (written fresh into the dump folder before each move, as the
server writes it, untimed) into a store on the disk:
  old:      safetensors load_file (mmap) + all_finite over both states + the ids check +
            write_sample (checksum and os.write over the mapping) + dropping the mapping
            (munmap) + unlink: what the client did until the streamed move;
  streamed: DumpFolder.open (header and ids, small preads) + sample_file.write_parts fed by
            DumpFile.chunks (pread into one reused buffer, NaN/Inf check, checksum, write,
            chunk by chunk) + unlink: what the client does now.
Both then fsync, fadvise and rename through the same routine. The two alternate, dump by dump,
so the disk's state weighs on both alike; each store file is checked byte-identical to the
other way's. CPU seconds are this process's (user + system), so the kernel's page faults,
unmapping and copies count; the disk's own writeback threads do not. Run from the repository root:

    python bench/dump_move.py --out /path/on/the/disk [--shm /dev/shm] [--dumps 8] [--seq 2048] [--hidden 4096]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import time
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

from pipeline.dump_protocol import request_key
from pipeline.extract.dumps import ChunkBuffer, DumpFolder, all_finite
from pipeline.store.sample_file import Sample, write_parts, write_sample
from pipeline.patch.sglang_dump import dump_parts
from pipeline.atomic_io import write_bytes_atomic

DTYPE = "bfloat16"


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def move_old(folder: DumpFolder, store: Path, index: int, key: str, ids: list[int], mask: list[int],
             hidden: int) -> dict:
    from safetensors.torch import load_file

    path = folder.dump_path(key)
    tensors = load_file(path)
    if not all(all_finite(tensors[n]) for n in ("hidden_state", "aux_hidden_state")):
        raise SystemExit(f"{path}: not finite")
    if not torch.equal(tensors["input_ids"], torch.tensor(ids, dtype=torch.int64)):
        raise SystemExit(f"{path}: ids differ")
    entry = write_sample(store, Sample(index=index, id=str(index), input_ids=tensors["input_ids"],
                                       loss_mask=torch.tensor(mask, dtype=torch.uint8),
                                       hidden_state=tensors["hidden_state"],
                                       aux_hidden_state=tensors["aux_hidden_state"]), hidden)
    del tensors  # the munmap
    folder.discard(key)
    return entry


def move_streamed(folder: DumpFolder, store: Path, index: int, key: str, ids: list[int], mask: list[int],
                  hidden: int, buf: ChunkBuffer) -> dict:
    with folder.open(key, ids, hidden, DTYPE) as dump:
        parts = chain((dump.input_ids,), dump.chunks(buf), (bytes(mask),))
        entry = write_parts(store, index, str(index), len(ids), hidden, DTYPE, parts)
    folder.discard(key)
    return entry


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder on the disk to measure (not tmpfs)")
    p.add_argument("--shm", default="/dev/shm", help="where the dump folder goes (default /dev/shm)")
    p.add_argument("--dumps", type=int, default=8, help="dumps moved each way (default 8)")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--chunks", default="1M", help="streamed buffer sizes to try, comma-separated (K/M suffixes)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script in seconds")
    args = p.parse_args()
    if args.smoke:
        args.dumps, args.seq, args.hidden = 2, 64, 64
    chunks = [int(c[:-1]) * {"K": 1 << 10, "M": 1 << 20}[c[-1].upper()] if c[-1].isalpha() else int(c)
              for c in args.chunks.split(",")]
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    folder = DumpFolder(Path(args.shm) / f"eagle3-dump-move-{os.getpid()}")
    folder.path.mkdir(parents=True)
    torch.set_num_threads(1)
    t = args.seq
    ids = [(i * 7919) % 32000 for i in range(t)]
    mask = [i % 2 for i in range(t)]
    states = torch.empty(t, 4 * args.hidden, dtype=torch.bfloat16).normal_()
    key = request_key(0, ids)
    head, buffers = dump_parts({"input_ids": torch.tensor(ids, dtype=torch.int64),
                                "hidden_state": states[:, :args.hidden].contiguous(),
                                "aux_hidden_state": states[:, args.hidden:].contiguous()},
                               {"rid": key, "tokens": str(t)})
    size = len(head) + sum(b.nbytes for b in buffers)
    print(f"one thread, {os.cpu_count()} cores; dumps of {t} tokens x hidden {args.hidden} bf16 ({size / 1e6:.1f} MB) "
          f"from {folder.path} into {out}; {args.dumps} moves each way, alternating", flush=True)
    ways = {"old": None, **{f"streamed {c >> 10} KB": ChunkBuffer(c) for c in chunks}}
    cost: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
    try:
        for n in range(args.dumps):
            files = {}
            for way, buf in ways.items():
                write_bytes_atomic(folder.dump_path(key), [head, *buffers])  # as the server does; untimed
                store = out / way.replace(" ", "-")
                c0, w0 = cpu_seconds(), time.perf_counter()
                if buf is None:
                    entry = move_old(folder, store, n, key, ids, mask, args.hidden)
                else:
                    entry = move_streamed(folder, store, n, key, ids, mask, args.hidden, buf)
                cost[way].append((cpu_seconds() - c0, time.perf_counter() - w0))
                files[way] = (entry, (store / entry["file"]).read_bytes())
                (store / entry["file"]).unlink()
            first = next(iter(files.values()))
            if any(f != first for f in files.values()):
                raise SystemExit("the two ways wrote different files or manifest lines")
        base = None
        for way, runs in cost.items():
            cpu = statistics.median(c for c, _ in runs)
            wall = statistics.median(w for _, w in runs)
            base = base or (cpu, wall)
            print(f"{way:>18}: per dump median CPU {cpu * 1000:7.1f} ms ({size / cpu / 1e9:5.2f} GB per CPU-second), "
                  f"wall {wall * 1000:7.1f} ms ({size / wall / 1e9:5.2f} GB/s); "
                  f"x{base[0] / cpu:.2f} less CPU, x{base[1] / wall:.2f} less wall than old", flush=True)
        print("store files and manifest lines byte-identical between the ways: yes", flush=True)
    finally:
        shutil.rmtree(folder.path, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
