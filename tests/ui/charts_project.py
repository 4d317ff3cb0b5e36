"""A project whose train and evaluate phases report what the real stages do, with fixed
figures: train logs loss and acc_0 every 10 steps for 3,000 steps and validates every 300
(val_loss, val_acc_0), as pipeline/train/loop.py does; evaluate writes a report (through its
record) with a sweep of five SGLang settings and names it in an artifact event, as
pipeline.evaluate --report does. Used by the chart tests and to drive the
console by hand: `PYTHONPATH=tests .venv/bin/python tests/ui/charts_project.py DIR` writes DIR/cfg.yaml."""

from __future__ import annotations

import sys
from pathlib import Path

from record_samples import local_report

from pipeline.records.evaluate_report import KIND

T0 = 1_750_000_000.0

CONFIG = """\
name: charts
vars:
  workdir: ./work
  report: ${workdir}/eval/acceptance.json
state_dir: ${workdir}/state
volumes: ["${workdir}"]
phases:
  - id: train
    title: Train the drafter
    run: [python3, train.py]
  - id: evaluate
    title: Measure acceptance length
    run: [python3, evaluate.py, "${report}"]
    outputs: ["${report}"]
  - id: idle
    title: A phase with no pictures
    run: [python3, -c, "print('idle')"]
"""

TRAIN = """\
import json, math, os
T0 = %r
ev = open(os.environ["EAGLE3_EVENTS"], "a")
def emit(**rec):
    ev.write(json.dumps(rec) + "\\n")
for k in range(1, 301):
    step, t = 10 * k, T0 + k
    loss = 1.3 + 4.2 * math.exp(-step / 500) + 0.12 * math.sin(step * 0.37)
    acc = 0.62 - 0.5 * math.exp(-step / 700) + 0.02 * math.cos(step * 0.23)
    emit(t=t, kind="progress", done=step, total=3000, unit="steps", tokens=step * 4096)
    emit(t=t, kind="metric", name="loss", value=round(loss, 5), step=step)
    emit(t=t, kind="metric", name="acc_0", value=round(acc, 4), step=step)
    emit(t=t, kind="metric", name="lr", value=1e-4, step=step)
    if step %% 300 == 0:
        print(f"train: step {step}/3000 validation: loss {loss + 0.2:.4f} acc {acc - 0.03:.3f}", flush=True)
        emit(t=t, kind="metric", name="val_loss", value=round(loss + 0.2, 5), step=step)
        emit(t=t, kind="metric", name="val_acc_0", value=round(acc - 0.03 - 0.1 * math.exp(-step / 900), 4), step=step)
ev.flush()
print("train: finished 3000 steps", flush=True)
"""

EVALUATE = """\
import json, os, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as f:
    f.write(%r)
os.replace(path + ".tmp", path)
with open(os.environ["EAGLE3_EVENTS"], "a") as ev:
    ev.write(json.dumps({"t": %r, "kind": "artifact", "path": path, "bytes": os.path.getsize(path)}) + "\\n")
print("evaluate: acceptance length 2.412 at 3 draft steps", flush=True)
print(f"evaluate: report -> {path}", flush=True)
"""


def write_charts_project(root: Path) -> Path:
    (root / "work").mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN % T0)
    (root / "evaluate.py").write_text(EVALUATE % (KIND.dumps(local_report()), T0 + 400))
    path = root / "cfg.yaml"
    path.write_text(CONFIG)
    return path


if __name__ == "__main__":
    print(write_charts_project(Path(sys.argv[1])))
