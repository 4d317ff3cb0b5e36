"""Console cost figures: the idle console with 8 fake GPUs (CPU % of one core, RSS); the
console following a phase's log (CPU and bytes written to the terminal per second, at 100 and
1,000 lines/s, at 80x24 and 160x48, beside the idle console in the same run); and a phase
printing 100k lines/s (display lag of the log pane, peak RSS).

    .venv/bin/python bench/console.py [--idle-s 30] [--follow-s 20] [--follow-rates 100,1000]
        [--follow-sizes 80x24,160x48] [--follow-separately] [--spew-s 10] [--rate 100000] [--size 160x48]

The idle figure is the real console process in a pseudo-terminal of --size (what tmux
gives it), measured with psutil over --idle-s seconds after a settling pause. When NVML
answers (a GPU box), it also runs the console on the real GPUs and nvitop (if installed)
side by side, each in its own pseudo-terminal, over the same window.

The following figure starts one phase per rate (each printing short lines at that rate),
then one console per size attached to each, plus an idle console per size, all at once in
their own pseudo-terminals over the same window; bytes are what each console wrote to its
terminal. With --follow-separately each console runs alone in its own window, one after
the other (the phases keep printing throughout), so the consoles do not load each other.
Run it on a quiet machine: the load average is printed beside the figures.

Targets (issues 10, 17): idle CPU <= 1 % of a core with 8 fake GPUs, and at most nvitop's on a
GPU box; following 100 lines/s <= 2 % of a core and <= 8 KB/s. This prints figures; it
asserts nothing."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import shutil
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

from console.core.lifecycle.project import Project  # noqa: E402
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


class Drained:
    """Bytes a program wrote to its terminal, counted by the thread that drains it."""

    def __init__(self) -> None:
        self.bytes = 0


def run_in_pty(argv: list[str], cols: int, rows: int, counter: Drained | None = None,
               extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`argv` on a pseudo-terminal of cols x rows, its output drained (counted, dropped)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows), **(extra_env or {}))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            if counter is not None:
                counter.bytes += len(chunk)

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
    figs = measure_ptys({n: (argv, size) for n, argv in named.items()}, seconds, settle)
    return {n: (cpu, rss) for n, (cpu, rss, _) in figs.items()}


def measure_ptys(named: dict[str, tuple[list[str], tuple[int, int]]], seconds: float,
                 settle: float = 8.0) -> dict[str, tuple[float, float, float]]:
    """{name: (CPU % of one core, RSS MB, bytes/s written to its terminal)} for programs run
    at once, each in its own pty of its own size."""
    counters = {name: Drained() for name in named}
    procs = {name: run_in_pty(argv, *size, counter=counters[name]) for name, (argv, size) in named.items()}
    try:
        time.sleep(settle)  # imports, first reads, first paint
        c0 = {n: cpu_seconds(p) for n, p in procs.items()}
        b0 = {n: c.bytes for n, c in counters.items()}
        w0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - w0
        out = {n: (100 * (cpu_seconds(p) - c0[n]) / wall, rss_mb(p), (counters[n].bytes - b0[n]) / wall)
               for n, p in procs.items()}
    finally:
        for p in procs.values():
            end_tree(p.pid)
    return out


def end_tree(pid: int) -> None:
    """The measured program and whatever it started (its pollers' helpers): asked, then made."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(tree, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


FOLLOW_CONFIG = """\
name: follow{rate}
vars:
  workdir: {work}
state_dir: ${{workdir}}/state
volumes: ["${{workdir}}"]
phases:
  - id: spew
    title: Print {rate} lines a second
    run: [python3, "{spew}", "{rate}", "{secs}"]
"""


def follow_figures(root: Path, rates: list[int], sizes: list[tuple[int, int]], seconds: float,
                   settle: float = 10.0, separately: bool = False) -> None:
    """Consoles following phases at each rate and size, beside idle consoles, in one window
    (or each alone in its own window, one after the other)."""
    script = root / "spew.py"
    me = str(Path(__file__).resolve())
    named: dict[str, tuple[list[str], tuple[int, int]]] = {}
    projects = []
    windows = len(sizes) * (len(rates) + 1 + (1 if nvml_present() else 0)) if separately else 1
    for rate in rates:
        work = root / f"follow{rate}"
        work.mkdir()
        cfg = root / f"follow{rate}.yaml"
        cfg.write_text(FOLLOW_CONFIG.format(rate=rate, work=work, spew=script,
                                            secs=(settle + seconds + 5) * windows + 30))
        project = Project.load(cfg)
        project.start("spew")
        projects.append(project)
        for cols, rows in sizes:
            named[f"{rate} lines/s {cols}x{rows}"] = ([sys.executable, me, CHILD_FAKE, str(cfg)], (cols, rows))
    idle = root / "idle.yaml"
    (root / "idlework").mkdir()
    idle.write_text(FOLLOW_CONFIG.format(rate=0, work=root / "idlework", spew=script, secs=1).replace(
        "Print 0 lines a second", "Never started"))
    for cols, rows in sizes:
        named[f"idle {cols}x{rows}"] = ([sys.executable, me, CHILD_FAKE, str(idle)], (cols, rows))
    nvitop = nvitop_path() if nvml_present() else None
    if nvitop:
        for cols, rows in sizes:
            named[f"nvitop {cols}x{rows}"] = ([nvitop], (cols, rows))
    load0 = os.getloadavg()[0]
    try:
        if separately:
            figs = {}
            for name, run in named.items():
                figs.update(measure_ptys({name: run}, seconds, settle))
        else:
            figs = measure_ptys(named, seconds, settle)
    finally:
        for project in projects:
            project.stop("spew", grace=2)
    how = "one at a time" if separately else "at once"
    print(f"following a phase's log, {len(named)} consoles {how} (8 fake GPUs each), {seconds:.0f} s each, "
          f"{os.cpu_count()} cores, load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after:")
    for name, (cpu, rss, bps) in figs.items():
        print(f"  {name:>22}: CPU {cpu:5.2f} % of one core, {bps / 1000:6.2f} KB/s to the terminal, RSS {rss:.0f} MB")


def nvitop_path() -> str | None:
    beside = Path(sys.executable).parent / "nvitop"
    return shutil.which("nvitop") or (str(beside) if beside.exists() else None)


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
        while "spew" not in main.follow.by_id:
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
        st = main.follow.by_id["spew"]
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
    ap.add_argument("--follow-s", type=float, default=20.0)
    ap.add_argument("--follow-rates", default="100,1000", help="lines/s of the followed phases")
    ap.add_argument("--follow-sizes", default="80x24,160x48", help="terminal sizes of the following consoles")
    ap.add_argument("--follow-separately", action="store_true",
                    help="measure each following (and idle) console alone, one after the other")
    ap.add_argument("--skip-idle", action="store_true", help="only the following (and spew) figures")
    ap.add_argument("--skip-follow", action="store_true")
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
        if not args.skip_follow:
            sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.follow_sizes.split(",")]
            follow_figures(root, [int(r) for r in args.follow_rates.split(",")], sizes, args.follow_s,  # type: ignore[misc]
                           separately=args.follow_separately)
        if args.skip_idle:
            pass
        else:
            figs = measure_side_by_side({"console": [sys.executable, me, CHILD_FAKE, str(cfg)]}, args.idle_s, (cols, rows))
            cpu, rss = figs["console"]
            print(f"idle console in a {cols}x{rows} pty, 8 fake GPUs, {args.idle_s:.0f} s: "
                  f"CPU {cpu:.2f} % of one core, RSS {rss:.0f} MB")
        if args.skip_idle:
            pass
        elif nvml_present():
            named = {"console": [sys.executable, "-m", "console", "console", str(cfg), "--no-mouse"]}
            nvitop = nvitop_path()
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
