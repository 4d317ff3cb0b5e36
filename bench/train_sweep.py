"""Learning rate x length sweep of `pipeline.train` on one store, judged on its held-out slice.

Every run trains from scratch on the same store with the same held-out samples
(`--val-samples`), so the figures compare: per run it prints the final training loss and
acc_0, the validation loss and acc_i, the tokens trained on and the seconds taken.

    python bench/train_sweep.py --store STORE --target TARGET --work DIR \
        --lr 1e-4 3e-4 1e-3 3e-3 --steps 300 1200 [--val-samples 200] [-- EXTRA TRAIN ARGS]

Extra arguments after `--` go to every run (e.g. `--batch-tokens 16384 --ttt-length 7
--device cuda`). Each run is its own `python -m pipeline.train` process in WORK/lr<X>-s<N>.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.records.train_summary import read_summary  # noqa: E402


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True, help="one run folder per setting is made here")
    p.add_argument("--lr", type=float, nargs="+", required=True)
    p.add_argument("--steps", type=int, nargs="+", required=True)
    p.add_argument("--val-samples", type=int, default=200)
    a = p.parse_args(argv)
    rows = []
    for steps in a.steps:
        for lr in a.lr:
            out = a.work / f"lr{lr:g}-s{steps}"
            cmd = [sys.executable, "-m", "pipeline.train", "--store", str(a.store), "--target", str(a.target),
                   "--out", str(out), "--overwrite", "--steps", str(steps), "--lr", str(lr),
                   "--val-samples", str(a.val_samples), "--val-every", str(steps), *extra]
            began = time.monotonic()
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
            took = time.monotonic() - began
            if proc.returncode != 0:
                print(f"lr {lr:g} steps {steps}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}", flush=True)
                continue
            s = read_summary(out / "summary.json")
            val_loss = s.val.loss if s.val and s.val.loss is not None else float("nan")
            val_acc = (s.val.acc if s.val else None) or ()
            rows.append((lr, steps, s.loss, s.acc[0], val_loss, val_acc, s.tokens, took))
            print(f"lr {lr:<8g} steps {steps:>6}  train loss {s.loss:.4f} acc_0 {s.acc[0]:.3f}  "
                  f"val loss {val_loss:.4f} acc " + " ".join(f"{x:.3f}" for x in val_acc)
                  + f"  {s.tokens:,} tokens  {took:.0f}s", flush=True)
    if rows:
        best = max(rows, key=lambda r: r[5][0] if r[5] else -1)
        print(f"best held-out acc_0: lr {best[0]:g}, {best[1]} steps ({best[5][0]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
