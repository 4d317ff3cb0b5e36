"""Console cost figures: the idle console with 8 fake GPUs (CPU % of one core, RSS), and
a phase printing 100k lines/s (display lag of the log pane, peak RSS).

    .venv/bin/python bench/console.py [--idle-s 30] [--spew-s 10] [--rate 100000] [--size 160x48]

The idle figure is the real console process in a pseudo-terminal of --size (what tmux
gives it), measured with psutil over --idle-s seconds after a settling pause. When NVML
answers (a GPU box), it also runs the console on the real GPUs and nvitop (if installed)
side by side, each in its own pseudo-terminal, over the same window.

Targets (issue 10): idle CPU <= 1 % of a core with 8 fake GPUs, and at most nvitop's on a
GPU box. This prints figures; it asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
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


CHILD_FAKE = "--child-fake-gpus"  # internal: run the console on 8 fake GPUs (what the pty runs)


def run_in_pty(argv: list[str], cols: int, rows: int) -> subprocess.Popen[bytes]:
    """`argv` on a pseudo-terminal of cols x rows, its output drained (and dropped)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
                            close_fds=True)
    os.close(slave)

    def drain() -> None:
        while True:
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    return proc


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


def rss_mb(proc: subprocess.Popen[bytes]) -> float:
    try:
        return psutil.Process(proc.pid).memory_info().rss / 1e6
    except psutil.Error:
        return float("nan")


def measure_side_by_side(named: dict[str, list[str]], seconds: float, size: tuple[int, int],
                         settle: float = 8.0) -> dict[str, tuple[float, float]]:
    """{name: (CPU % of one core, RSS MB)} for programs run at once, each in its own pty."""
    procs = {name: run_in_pty(argv, *size) for name, argv in named.items()}
    try:
        time.sleep(settle)  # imports, first reads, first paint
        c0 = {n: cpu_seconds(p) for n, p in procs.items()}
        w0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - w0
        out = {n: (100 * (cpu_seconds(p) - c0[n]) / wall, rss_mb(p)) for n, p in procs.items()}
    finally:
        for p in procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
    return out


def nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU figures
        return False


def make_app(project: Project) -> ConsoleApp:
    return ConsoleApp(project, gpu_source=FakeGpuSource(n=8, failing=(3,)), disk_source=FakeDiskSource(),
                      shm_source=FakeShmSource(), host_source=FakeHostSource())


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


def child_fake(config: str) -> int:
    from console.ui.app import run_console

    project = Project.load(config)
    return run_console(project, mouse=False, gpu_source=FakeGpuSource(n=8, failing=(3,)))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == CHILD_FAKE:
        return child_fake(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--spew-s", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=100_000)
    ap.add_argument("--size", default="160x48", help="terminal COLSxROWS for the idle figures")
    ap.add_argument("--skip-spew", action="store_true")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="eagle3-bench-") as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        script = root / "spew.py"
        script.write_text(SPEW)
        cfg = root / "bench.yaml"
        cfg.write_text(CONFIG.format(rate=args.rate, secs=args.spew_s, spew=script))
        project = Project.load(cfg)
        me = str(Path(__file__).resolve())
        figs = measure_side_by_side({"console": [sys.executable, me, CHILD_FAKE, str(cfg)]}, args.idle_s, (cols, rows))
        cpu, rss = figs["console"]
        print(f"idle console in a {cols}x{rows} pty, 8 fake GPUs, {args.idle_s:.0f} s: "
              f"CPU {cpu:.2f} % of one core, RSS {rss:.0f} MB")
        if nvml_present():
            named = {"console": [sys.executable, "-m", "console", "console", str(cfg), "--no-mouse"]}
            nvitop = shutil.which("nvitop") or (str(Path(sys.executable).parent / "nvitop")
                                                 if (Path(sys.executable).parent / "nvitop").exists() else None)
            if nvitop:
                named["nvitop"] = [nvitop]
            figs = measure_side_by_side(named, args.idle_s, (cols, rows))
            line = "; ".join(f"{n} CPU {c:.2f} % of one core, RSS {r:.0f} MB" for n, (c, r) in figs.items())
            print(f"side by side on the real GPUs (NVML), {cols}x{rows} ptys, {args.idle_s:.0f} s: {line}"
                  + ("" if nvitop else " (nvitop not installed)"))
        else:
            print("no NVML here: no real-GPU figures (nor nvitop beside them)")
        if not args.skip_spew:
            asyncio.run(spew(project, args.spew_s, args.rate))
            project.stop("spew", grace=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
