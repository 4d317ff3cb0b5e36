"""SGLang extraction client throughput: does it move dumps into the store at >= 0.9x the
store's own write bound?

One run, CPU only (no GPU, no SGLang): the stand-in server (tests/pipeline/standin_sglang.py,
its own process, dumps written by pipeline.patch.sglang_dump's writer into /dev/shm as fast as it
can) answers the client, and we measure
  1. the store's write bound: its own sample writer (write_sample: checksum, temp + fsync +
     rename) on 2, 4 and 8 threads from memory, as bench/extract.py measures it;
  2. the dump path alone: requests answered, dumps checked, streamed through the NaN/Inf check
     and deleted, no store;
  3. end to end: pipeline.extract's SGLang client over --samples samples into a fresh store,
     with as many store writers (--writers) as gave the write bound in 1 unless told otherwise.
The target is end to end >= 0.9 x the write bound. Run from the repository root:

    python bench/extract_sglang.py --out /path/on/the/disk [--samples 48] [--seq 2048] [--hidden 4096] [--pin]

With --pin the stand-in runs on its own cores (--standin-cores, default a quarter) and this
process (the client, and the write bound it is compared with) on the rest, so a stand-in
that shares the cores cannot hold the client back: step [4] then is the client's own rate
against the bound measured on the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch
from safetensors.torch import save_file

from pipeline.events import EventWriter
from pipeline.dump_protocol import dump_size_bound, request_key
from pipeline.extract import dumps as dumps_module
from pipeline.extract.dumps import ChunkBuffer, DumpFolder
from pipeline.extract.job import prepare
from pipeline.extract.options import Options
from pipeline.extract.reserve import volume_of
from pipeline.sizes import parse_size
from pipeline.store.layout import sample_bytes
from pipeline.store.meta import TargetInfo
from pipeline.extract.sglang_client import Extraction, check_server, plan
from pipeline.extract.sglang_http import SGLangServer
from pipeline.extract.sharding import Shard
from store_bound import store_write  # noqa: E402

STANDIN = REPO / "tests" / "pipeline" / "standin_sglang.py"
VOCAB = 32000


def log(msg: str) -> None:
    print(msg, flush=True)


def make_target(folder: Path, hidden: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": hidden,
                                                    "num_hidden_layers": 32, "vocab_size": VOCAB}))
    save_file({"embed": torch.zeros(8, 8)}, str(folder / "model.safetensors"))
    return folder


def write_dataset(path: Path, n: int, seq: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(n):
            ids = [rng.randrange(VOCAB) for _ in range(seq)]
            f.write(json.dumps({"id": f"bench-{i}", "input_ids": ids, "loss_mask": [1] * seq}) + "\n")


def shm_pages(path: Path) -> str:
    """The page size the dump folder's tmpfs gives files: with 4 KB pages, creating, reading and
    deleting a dump costs the kernel a good part of the move's CPU (67 MB on the 2-core dev box:
    the client's read ~14 ms and delete ~10 ms; ~5 ms and under 1 ms with huge pages)."""
    best = ("", "", "")
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, fstype, opts = line.split()[:4]
        mnt = mnt.replace("\\040", " ")
        if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, fstype, opts)
    mnt, fstype, opts = best
    huge = next((o.split("=", 1)[1] for o in opts.split(",") if o.startswith("huge=")), "never")
    return f"{mnt} ({fstype}, huge={huge})" if fstype == "tmpfs" else f"{mnt} ({fstype})"


def split_cores(standin: int | None) -> tuple[set[int], set[int]]:
    """(stand-in's cores, the client's cores) out of those this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit(f"--pin needs at least 2 cores; this process may use {len(cores)}")
    k = standin if standin is not None else max(1, len(cores) // 4)
    if not 1 <= k < len(cores):
        raise SystemExit(f"--standin-cores must be between 1 and {len(cores) - 1}, got {k}")
    return set(cores[:k]), set(cores[k:])


def core_list(cores: set[int]) -> str:
    c = sorted(cores)
    return f"{c[0]}-{c[-1]}" if c == list(range(c[0], c[-1] + 1)) else ",".join(map(str, c))


def start_standin(target: Path, dump_dir: Path, budget: int, port_file: Path,
                  cores: set[int] | None = None) -> subprocess.Popen:
    env = dict(os.environ, EAGLE3_DUMP_DIR=str(dump_dir), EAGLE3_DUMP_BUDGET=str(budget),
               PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None  # before its first thread
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--model-path", str(target), "--port", "0",
                             "--port-file", str(port_file), "--fast"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pin)
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"stand-in did not start: {proc.stderr.read().decode()[-500:]}")
        time.sleep(0.05)
    return proc


def dump_path_only(server: SGLangServer, folder: DumpFolder, data: Path, n: int, hidden: int,
                   concurrency: int) -> float:
    """tokens/s of answer + wait + check + stream through the NaN/Inf check + delete, with no
    store write (the client's own read, in a buffer per thread)."""
    records = [json.loads(line) for line in data.read_text().splitlines()[:n]]
    buffers = threading.local()

    def one(i: int) -> int:
        ids = records[i]["input_ids"]
        key = request_key(100000 + i, ids)
        server.generate(ids, key)
        while not folder.dump_path(key).exists():
            time.sleep(0.001)
        if not hasattr(buffers, "buf"):
            buffers.buf = ChunkBuffer()
        with folder.open(key, ids, hidden, "bfloat16") as dump:
            for _ in dump.chunks(buffers.buf):
                pass
        folder.discard(key)
        return len(ids)

    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, range(n)))
    return tokens / (time.perf_counter() - t)


def client_alone(server: SGLangServer, folder: DumpFolder, target: Path, out: Path, data: Path, budget: int,
                 opts: Options, args: argparse.Namespace):
    """The client's own move rate: as many samples as the budget holds are requested and
    their dumps waited for first; then a fresh extraction finds every dump already there (the
    path a resumed run takes) and only checks, streams and deletes. The stand-in is idle
    meanwhile, so on a machine of few cores this shows what the client does with them."""
    m = max(1, min(args.samples, int(budget * 0.9) // dump_size_bound(args.seq, args.hidden)))
    lines = data.read_text().splitlines()[:m]
    sub = out / "data-ahead.jsonl"
    sub.write_text("\n".join(lines) + "\n")

    def one(i: int) -> None:
        ids = json.loads(lines[i])["input_ids"]
        key = request_key(i, ids)
        server.generate(ids, key)
        while not folder.dump_path(key).exists():
            time.sleep(0.001)  # wait-ok: polling for the stand-in's dump

    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(one, range(m)))
    job = prepare(Options(data=sub, out=out / "store-ahead", reserve=0), TargetInfo.from_dir(target),
                  "bfloat16", Shard(0, 1))
    try:
        return Extraction(job, opts, server, EventWriter(None), log=lambda s: None).run(plan(job, opts))
    finally:
        if job.lock is not None:
            job.lock.release()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="a folder on the disk to measure (not tmpfs)")
    p.add_argument("--shm", default="/dev/shm", help="where the dump folder goes (default /dev/shm; a tmpfs "
                   "mounted with huge=within_size shows what huge pages save)")
    p.add_argument("--samples", type=int, default=48)
    p.add_argument("--seq", type=int, default=2048, help="tokens per sample")
    p.add_argument("--hidden", type=int, default=4096, help="hidden size (Llama-3.1-8B: 4096; Kimi-K2.5: 7168)")
    p.add_argument("--concurrency", type=int, default=8, help="client requests in flight (default 8, the client's)")
    p.add_argument("--writers", default="best",
                   help="the client's store writer threads (--writers): 'best' (default: the thread count that gave "
                        "the write bound in [1], as an operator sets it for the disk) or a number (the client's "
                        "own default is 4)")
    p.add_argument("--budget", default="4GB", help="dump folder budget")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script in seconds")
    p.add_argument("--chunk", default=None, help="the client's chunk buffer size (default the client's own, "
                   "pipeline.extract.dumps.CHUNK_BYTES)")
    p.add_argument("--pin", action="store_true",
                   help="the stand-in on its own cores, the client (and the write bound) on the rest")
    p.add_argument("--standin-cores", type=int, default=None,
                   help="with --pin: how many cores the stand-in gets (default a quarter, at least 1)")
    return p.parse_args()


def write_bound(out: Path, args: argparse.Namespace, per_token: float) -> tuple[float, int]:
    """[1]: the store's write bound in tokens/s, and the writer thread count that gave it."""
    files = args.samples  # as many bytes as the end-to-end run: a disk's sustained rate, not its burst
    speeds = {w: store_write(out, files, w, args.seq, args.hidden, VOCAB) for w in (2, 4, 8)}
    for w, s in speeds.items():
        log(f"[1] store write bound, write_sample on {w} threads (checksum, temp+fsync+rename): {s:.3f} GB/s")
    best = max(speeds, key=speeds.get)
    bound = speeds[best] * 1e9 / per_token
    log(f"    write bound: {bound:,.0f} tokens/s ({speeds[best]:.3f} GB/s, {best} threads)")
    return bound, best


def watched_run(job, opts: Options, server: SGLangServer, folder: DumpFolder):
    """The client's extraction, with the dump folder's peak occupancy and this process's CPU
    seconds (user + system) taken while it runs."""
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.005):
            peak[0] = max(peak[0], folder.occupancy()[1])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    res = Extraction(job, opts, server, EventWriter(None), log=lambda s: None).run(plan(job, opts))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    stop.set()
    watcher.join()
    return res, peak[0], client_cpu


def end_to_end(server: SGLangServer, folder: DumpFolder, opts: Options, target: Path, data: Path, out: Path,
               bound: float, rate: float) -> float:
    """[3]: the client into a fresh store, held to the write bound and the dump path's rate; returns tokens/s."""
    job = prepare(Options(data=data, out=out / "store", reserve=0), TargetInfo.from_dir(target),
                  "bfloat16", Shard(0, 1))
    res, peak, client_cpu = watched_run(job, opts, server, folder)
    if job.lock is not None:
        job.lock.release()
    e2e = res.tokens / res.seconds
    log(f"[3] end to end ({opts.concurrency} requests in flight, {opts.writers} store writers): {res.samples} samples, {res.tokens:,} tokens, {res.bytes / 1e9:.2f} GB into the store "
        f"in {res.seconds:.2f} s: {e2e:,.0f} tokens/s ({res.bytes / res.seconds / 1e9:.3f} GB/s); "
        f"{res.retried} retries; dump folder peak {peak / 1e6:.1f} MB of {opts.dump_budget / 1e6:.0f} MB; "
        f"complete: {res.complete}")
    log(f"    the client's CPU (this process, user + system): {client_cpu:.2f} s, "
        f"{client_cpu / max(res.samples, 1) * 1000:.1f} ms per sample")
    log(f"    end to end is {e2e / bound:.3f} x the store's write bound (target >= 0.900): "
        f"{'MET' if e2e >= 0.9 * bound else 'MISSED'}")
    both = 1 / (1 / bound + 1 / rate)
    log(f"    bottleneck min(write {bound:,.0f}, dump path {rate:,.0f}) = {min(bound, rate):,.0f} tokens/s: end to "
        f"end is {e2e / min(bound, rate):.3f} x of it; if the two share one resource (cores, memory bandwidth: "
        f"the stand-in runs on the same machine) the bound is {both:,.0f} tokens/s and end to end is "
        f"{e2e / both:.3f} x of that")
    return e2e


def dump_path_figures(server: SGLangServer, folder: DumpFolder, data: Path, args: argparse.Namespace,
                      per_token: float) -> float:
    """[2]: the dump path's tokens/s with no store (after one warm-up pair: the stand-in computes its block once)."""
    dump_path_only(server, folder, data, 2, args.hidden, 1)
    n = min(args.samples, 24)
    rate = dump_path_only(server, folder, data, n, args.hidden, args.concurrency)
    log(f"[2] dump path alone (stand-in answers and writes to shm; client checks, streams, deletes), "
        f"{args.concurrency} in flight: {rate:,.0f} tokens/s ({rate * per_token / 1e9:.3f} GB/s)")
    return rate


def report_ahead(ahead, bound: float, e2e: float, standin_cores: set[int] | None) -> None:
    """[4]: the client alone on dumps written ahead of it, against the bound (and, pinned, what that says)."""
    log(f"[4] the client alone, every dump written before it starts (a server running ahead of it, as the "
        f"stand-in wrote them as fast as it can): {ahead.samples} samples, {ahead.bytes / 1e9:.2f} GB into the "
        f"store in {ahead.seconds:.2f} s: {ahead.tokens / ahead.seconds:,.0f} tokens/s, "
        f"{ahead.tokens / ahead.seconds / bound:.3f} x the store's write bound; complete: {ahead.complete}")
    if standin_cores is not None:
        alone = ahead.tokens / ahead.seconds / bound
        log(f"    pinned ({len(standin_cores)} stand-in cores, {len(os.sched_getaffinity(0))} client cores): "
            f"the client alone is {alone:.3f} x the bound on its own cores, end to end {e2e / bound:.3f} x; "
            + ("the client itself is under 0.9x: the hold-up is in the client, not the shared cores"
               if alone < 0.9 else "the client alone reaches 0.9x: what end to end loses is the sharing"))


def main() -> None:
    args = parse_args()
    standin_cores: set[int] | None = None
    if args.pin:
        standin_cores, client_cores = split_cores(args.standin_cores)
        os.sched_setaffinity(0, client_cores)  # before any thread: every later one inherits it
        torch.set_num_threads(len(client_cores))
    if args.smoke:
        args.samples, args.seq, args.hidden = 12, 64, 64
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    dump_dir = Path(args.shm) / f"eagle3-bench-{os.getpid()}"
    budget = parse_size(args.budget)
    if args.chunk is not None:
        dumps_module.CHUNK_BYTES = parse_size(args.chunk)
    per_token = sample_bytes(args.seq, args.hidden, "bfloat16") / args.seq
    log(f"CPU only: {os.cpu_count()} cores, torch {torch.__version__}; store on {out} ({volume_of(out)}), "
        f"dumps in {dump_dir} (budget {budget / 1e9:.1f} GB)")
    log(f"dump folder's volume: {shm_pages(Path(args.shm).resolve())}")
    if standin_cores is not None:
        log(f"pinned: the stand-in on cores {core_list(standin_cores)}, the client and the write bound on cores "
            f"{core_list(os.sched_getaffinity(0))}")
    log(f"{args.samples} samples of {args.seq} tokens, hidden {args.hidden}: {per_token:,.0f} bytes per token "
        f"in the store, {per_token * args.seq / 1e6:.1f} MB per sample; the client's chunk buffer "
        f"{dumps_module.CHUNK_BYTES >> 10} KB")

    target = make_target(out / "target", args.hidden)
    data = out / "data.jsonl"
    write_dataset(data, args.samples, args.seq)
    bound, best = write_bound(out, args, per_token)
    writers = best if args.writers == "best" else int(args.writers)

    proc = start_standin(target, dump_dir, budget, out / "port", standin_cores)
    try:
        url = f"http://127.0.0.1:{(out / 'port').read_text()}"
        server = SGLangServer(url, timeout=120)
        check_server(server, target)
        folder = DumpFolder(dump_dir)
        rate = dump_path_figures(server, folder, data, args, per_token)
        opts = Options(server=url, dump_dir=dump_dir, dump_budget=budget, concurrency=args.concurrency,
                       writers=writers)
        e2e = end_to_end(server, folder, opts, target, data, out, bound, rate)
        report_ahead(client_alone(server, folder, target, out, data, budget, opts, args), bound, e2e, standin_cores)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(dump_dir, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
