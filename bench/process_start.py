"""How long our processes take to start: the launcher before it can start a phase, the `eagle3`
command line, and each stage program's `--help`. The suite starts hundreds of them, and an
operator waits on every one. Each is timed on a copy of the checkout twice: as Python compiles it
anew in every process (PYTHONDONTWRITEBYTECODE=1, no bytecode: what an editable install gives on
such a machine) and with its bytecode compiled once (`make bytecode`, run by `make test` and
`make demo`). Prints the median wall time of each.

    python bench/process_start.py [--runs 7]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROCESSES = {
    "launcher (imports before the phase starts)": ["-c", "import console.launcher"],
    "launcher and its supervision": ["-c", "import console.launcher, console.supervision"],
    "eagle3 --help": ["-m", "console", "--help"],
    "pipeline.merge --help": ["-m", "pipeline.merge", "--help"],
    "pipeline.extract --help": ["-m", "pipeline.extract", "--help"],
    "pipeline.train --help": ["-m", "pipeline.train", "--help"],
    "pipeline.evaluate --help": ["-m", "pipeline.evaluate", "--help"],
}


def median_start(tree: Path, args: list[str], runs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7, help="starts of each process per figure (median)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="eagle3-start-") as tmp:
        tree = Path(tmp)
        for pkg in ("console", "pipeline", "themes"):
            shutil.copytree(REPO / pkg, tree / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        cold = {name: median_start(tree, args, a.runs) for name, args in PROCESSES.items()}
        for pkg in ("console", "pipeline", "themes"):
            compileall.compile_dir(tree / pkg, quiet=1)
        warm = {name: median_start(tree, args, a.runs) for name, args in PROCESSES.items()}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, median of {a.runs} starts")
    print(f"{'process':46} {'compiled each time':>18} {'bytecode':>9}")
    for name in PROCESSES:
        print(f"{name:46} {cold[name]:17.2f}s {warm[name]:8.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
