"""Can LogTail keep up with a phase printing 100k lines a second?

A writer process appends lines (each carrying the wall time it was written, every 1000th one
a carriage-return progress line) at a fixed rate for N seconds, while this process polls a
LogTail every 100 ms as the console's log view does. Prints the line rate the tail sustained,
the lag between a line's write and the poll that returned it (p50/p99/max), poll cost and
peak RSS. Figures only; nothing here passes or fails.

    .venv/bin/python bench/logtail.py [--seconds 10] [--rate 100000] [--poll 0.1]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.core.files.logtail import LogTail, is_marker  # noqa: E402

PAYLOAD = "rank0 step=1234 loss=2.3456 lr=1.0e-4 grad_norm=0.87 tokens=4096"


def writer(path: str, rate: int, seconds: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    start = time.perf_counter()
    n = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        target = int(elapsed * rate)
        if n >= target:
            time.sleep(0.0005)
            continue
        k = min(target - n, 10_000)
        ts = f"{time.time():.6f}"
        parts = []
        for i in range(n, n + k):
            if i % 1000 == 999:
                parts.append(f"\r{i} t={ts} progress 10%\r{i} t={ts} progress 100%\n")
            else:
                parts.append(f"{i} t={ts} {PAYLOAD}\n")
        os.write(fd, "".join(parts).encode())
        n += k
    os.write(fd, f"END {n} t={time.time():.6f}\n".encode())
    os.close(fd)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=100_000, help="lines per second the writer prints")
    ap.add_argument("--poll", type=float, default=0.1, help="seconds between polls")
    ap.add_argument("--max-lines", type=int, default=5000)
    ap.add_argument("--writer", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        writer(args.writer, args.rate, args.seconds)
        return 0

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "output.log")
        tail = LogTail(path, max_lines=args.max_lines)
        proc = subprocess.Popen(
            [sys.executable, __file__, "--writer", path, "--rate", str(args.rate), "--seconds", str(args.seconds)]
        )
        lags: list[float] = []
        newest_lags: list[float] = []
        poll_ms: list[float] = []
        last_line = ""
        markers = 0
        start = time.time()
        next_poll = time.monotonic()
        while True:
            done = proc.poll() is not None
            t0 = time.perf_counter()
            lines = tail.poll()
            poll_ms.append((time.perf_counter() - t0) * 1000)
            seen = time.time()
            for ln in lines:
                if is_marker(ln):
                    markers += 1
                    continue
                try:
                    lags.append(seen - float(ln.split(" t=", 1)[1].split(" ", 1)[0]))
                except (IndexError, ValueError):
                    pass
            if lines:
                last_line = lines[-1]
                try:
                    newest_lags.append(seen - float(last_line.split(" t=", 1)[1].split(" ", 1)[0]))
                except (IndexError, ValueError):
                    pass
            if done and tail.offset >= os.path.getsize(path):
                break
            next_poll += args.poll
            time.sleep(max(0.0, next_poll - time.monotonic()))
        elapsed = time.time() - start
        size = os.path.getsize(path)
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    written = int(last_line.split()[1]) if last_line.startswith("END ") else None
    print(f"writer: {args.rate:,} lines/s asked for {args.seconds:g} s; wrote {written or '?':,} lines, {size / 1e6:.1f} MB")
    print(f"tail:   {tail.lines_seen / elapsed:,.0f} lines/s sustained ({tail.lines_seen:,} lines in {elapsed:.1f} s), "
          f"{tail.skipped_bytes / 1e6:.1f} MB skipped, {markers} marker lines")
    print(f"lag (write -> poll returned it), all returned lines: p50 {pct(lags, 50) * 1000:.0f} ms, "
          f"p99 {pct(lags, 99) * 1000:.0f} ms, max {max(lags, default=float('nan')) * 1000:.0f} ms")
    print(f"lag of the newest line per poll: p50 {pct(newest_lags, 50) * 1000:.0f} ms, "
          f"p99 {pct(newest_lags, 99) * 1000:.0f} ms, max {max(newest_lags, default=float('nan')) * 1000:.0f} ms")
    print(f"poll cost: p50 {pct(poll_ms, 50):.1f} ms, p99 {pct(poll_ms, 99):.1f} ms, max {max(poll_ms):.1f} ms over {len(poll_ms)} polls")
    print(f"retained lines: {len(tail.lines)} (max {args.max_lines}); last line correct: {last_line.startswith('END ')}")
    print(f"peak RSS: {rss_peak / 1024:.1f} MB (before the tail: {rss_before / 1024:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
