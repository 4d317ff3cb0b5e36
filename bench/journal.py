"""What `eagle3 journal` costs on a large journal: wall time and peak memory of the command.

Writes a journal of about --mib MiB of records shaped like the core's (runs started and
ended, check results, overrides), then runs `eagle3 journal CONFIG` with and without `--json`
(and with `-n 20`), output to /dev/null, and prints each run's wall time, records per second
and peak RSS. Figures only; nothing here passes or fails.

    .venv/bin/python bench/journal.py [--mib 1024] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """\
name: bench-journal
state_dir: ./state
phases:
  - id: train
    run: [true]
"""


def records(i: int) -> list[dict]:
    t = 1_700_000_000.0 + i
    run = f"20240101-{i:08d}"
    return [
        {"t": t, "event": "run_started", "phase": "train", "run_id": run, "user": "op", "host": "gpu-box-1"},
        {"t": t + 0.5, "event": "checks", "phase": "train", "user": "op", "host": "gpu-box-1",
         "results": [{"name": f"free_space:/data/{k}", "status": "pass", "message": "812.4 GB free, 120 GB needed"}
                     for k in range(3)]},
        {"t": t + 1, "event": "run_ended", "phase": "train", "run_id": run, "code": 0, "duration_s": 3600.5,
         "verify": "pass", "user": "op", "host": "gpu-box-1"},
    ]


def write_journal(path: Path, mib: int) -> int:
    """About `mib` MiB of records; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < mib << 20:
            chunk = "".join(json.dumps(r, separators=(",", ":")) + "\n" for i in range(n, n + 1000)
                            for r in records(i))
            f.write(chunk)
            written += len(chunk)
            n += 1000
    return n * 3


def measure(cfg: Path, argv: list[str]) -> tuple[float, int, int]:
    """(seconds, peak RSS in bytes, exit code) of one `eagle3 journal` run."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "console", "journal", str(cfg), *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return took, usage.ru_maxrss * 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--keep", type=Path, help="write the journal here and leave it")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-journal-"))
    cfg = root / "bench.yaml"
    cfg.write_text(CONFIG)
    journal = root / "state" / "journal.jsonl"
    t0 = time.perf_counter()
    count = write_journal(journal, args.mib)
    size = journal.stat().st_size
    print(f"journal: {size / 2**20:,.0f} MiB, {count:,} records (written in {time.perf_counter() - t0:.1f} s)")
    for argv in ([], ["--json"], ["-n", "20"]):
        took, rss, code = measure(cfg, argv)
        shown = count if "-n" not in argv else 20
        print(f"eagle3 journal {' '.join(argv) or '(all)':<8}  exit {code}  {took:7.1f} s  "
              f"{shown / took:>10,.0f} records/s  peak RSS {rss / 2**20:7,.1f} MiB")
    if args.keep is None:
        journal.unlink()


if __name__ == "__main__":
    main()
