"""Console cost figures: the idle console with 8 fake GPUs (CPU % of one core, RSS), and
a phase printing 100k lines/s (display lag of the log pane, peak RSS).

    .venv/bin/python bench/console.py [--idle-s 30] [--spew-s 10] [--rate 100000]

Targets (issue 3): idle CPU <= 2 % of a core, RSS <= 150 MB, lag <= 1 s. This prints
figures; it asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.core.project import Project  # noqa: E402
from console.core.telemetry.fake import (  # noqa: E402
    FakeDiskSource,
    FakeGpuSource,
    FakeHostSource,
    FakeShmSource,
)
from console.ui.app import ConsoleApp  # noqa: E402

SPEW = r"""
import sys, time
rate, secs = int(sys.argv[1]), float(sys.argv[2])
t0 = time.time(); n = 0
while True:
    now = time.time()
    if now - t0 >= secs:
        break
    target = int((now - t0) * rate)
    if target > n:
        sys.stdout.write("".join(f"{i} {now:.3f} spew spew spew spew\n" for i in range(n, target)))
        sys.stdout.flush()
        n = target
    else:
        time.sleep(0.001)
print(f"END {n} {time.time():.3f}", flush=True)
"""

CONFIG = """\
name: bench
vars:
  workdir: ./work
state_dir: ${{workdir}}/state
volumes: ["${{workdir}}"]
phases:
  - id: idle
    title: An idle phase
    run: [python3, -c, "print(1)"]
  - id: spew
    title: Print {rate} lines a second
    run: [python3, "{spew}", "{rate}", "{secs}"]
"""


def make_app(project: Project) -> ConsoleApp:
    return ConsoleApp(project, gpu_source=FakeGpuSource(n=8, failing=(3,)), disk_source=FakeDiskSource(),
                      shm_source=FakeShmSource(), host_source=FakeHostSource())


async def idle(project: Project, seconds: float) -> None:
    proc = psutil.Process()
    app = make_app(project)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(3.0)  # first reads, imports, layout
        c0 = proc.cpu_times()
        w0 = time.monotonic()
        rss_peak = 0
        while time.monotonic() - w0 < seconds:
            await asyncio.sleep(1.0)
            rss_peak = max(rss_peak, proc.memory_info().rss)
        c1 = proc.cpu_times()
        wall = time.monotonic() - w0
    cpu = (c1.user + c1.system - c0.user - c0.system) / wall * 100
    print(f"idle console, 8 fake GPUs, {wall:.0f} s: CPU {cpu:.2f} % of one core, "
          f"RSS {proc.memory_info().rss / 1e6:.0f} MB (peak {rss_peak / 1e6:.0f} MB)")


async def spew(project: Project, seconds: float, rate: int) -> None:
    proc = psutil.Process()
    app = make_app(project)
    lags: list[float] = []
    rss_peak = 0
    async with app.run_test(size=(160, 48)) as pilot:
        main = app.main_screen()
        while "spew" not in main.by_id:
            await pilot.pause(0.05)
        main.query_one("#phases").select_id("spew")
        main.start_phase("spew", {}, False)
        log = main.query_one("#log")
        c0 = proc.cpu_times()
        w0 = time.monotonic()
        end_seen = None
        while time.monotonic() - w0 < seconds + 20:
            await asyncio.sleep(0.1)
            rss_peak = max(rss_peak, proc.memory_info().rss)
            last = log.last_line or ""
            parts = last.split()
            ends = [ln for ln in log.lines[-5:] if ln.startswith("END ")]
            if ends:
                end_seen = time.time() - float(ends[-1].split()[2])
                break
            if len(parts) >= 2:
                try:
                    lags.append(time.time() - float(parts[1]))
                except ValueError:
                    pass
        c1 = proc.cpu_times()
        wall = time.monotonic() - w0
        st = main.by_id["spew"]
    cpu = (c1.user + c1.system - c0.user - c0.system) / wall * 100
    if lags:
        lags.sort()
        p50 = statistics.median(lags)
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        print(f"phase printing {rate} lines/s for {seconds:.0f} s: display lag median {p50:.2f} s, "
              f"p99 {p99:.2f} s, max {lags[-1]:.2f} s; console CPU {cpu:.0f} % of one core; "
              f"peak RSS {rss_peak / 1e6:.0f} MB; final line shown {end_seen if end_seen is None else round(end_seen, 2)} s "
              f"after it was written; phase state {st.state}")
    else:
        print("phase printing lines: no timestamped line reached the log pane")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--spew-s", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="eagle3-bench-") as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        script = root / "spew.py"
        script.write_text(SPEW)
        cfg = root / "bench.yaml"
        cfg.write_text(CONFIG.format(rate=args.rate, secs=args.spew_s, spew=script))
        project = Project.load(cfg)
        asyncio.run(idle(project, args.idle_s))
        asyncio.run(spew(project, args.spew_s, args.rate))
        project.stop("spew", grace=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
