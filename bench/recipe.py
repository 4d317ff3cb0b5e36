"""The recipe on the device, through `eagle3 run` (issue 37): size it, run a call, report it.

The recipe is configs/examples/smollm2-h200.yaml and nothing else. This script only
  size     sets train_steps (and with it the checkpoint and log intervals the measured run used: a
           quarter and a twentieth of it) from a measured rate and the seconds a plan leaves for
           training, or as given;
  call     runs one device call: `eagle3 run CONFIG --all` with the --set values kept in
           WORK/recipe-sets.json, so every call runs the same commands (a phase whose command changed
           would be stale). With --until the phases still live at the deadline get the console's stop
           and keep their checkpoints (a later call resumes them); with --leave-running the walk is
           interrupted after --budget-s and the phases run on, detached (a later call's walk waits
           for them). Then `eagle3 status --json` and the journal's tail go to --result;
  report   acceptance, training, regeneration and merge figures from the stages' typed records
           (pipeline.records), appended to --result.

    python bench/recipe.py size --work DIR (--steps N | --steps-per-s R --train-s S)
    python bench/recipe.py call --work DIR --result FILE --label 2 [--set VAR=VALUE ...]
        (--until 9m | --leave-running --budget-s 530) [--parallel 4] [--commit C]
    python bench/recipe.py report --work DIR --result FILE
    python bench/recipe.py shot --work DIR --svg FILE.svg     (the console attached to the run, 160x48)

bench/recipe_device.sh holds each device call's command line; bench/recipe_device.md the plan.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from console.core.config.loader import load_config  # noqa: E402
from console.core.model.config import Config  # noqa: E402
from pipeline.records.evaluate_report import read_report  # noqa: E402
from pipeline.records.merge_stats import read_stats as read_merge_stats  # noqa: E402
from pipeline.records.regenerate_stats import read_stats as read_regen_stats  # noqa: E402
from pipeline.records.synthesis_stats import read_stats as read_synth_stats  # noqa: E402
from pipeline.records.train_summary import read_summary  # noqa: E402
from result_log import Log, commit, utc_now  # noqa: E402

CONFIG = REPO / "configs" / "examples" / "smollm2-h200.yaml"
SETS = "recipe-sets.json"
JOURNAL_LINES = 40


class RecipeError(Exception):
    """A bench input or an earlier call's output that is missing; str() says what to do."""


# ---- the --set values every call passes ------------------------------------------------------------

def read_sets(work: Path) -> dict[str, str]:
    """The values every call passes: the config's `data` is the run's folder unless set."""
    path = work / SETS
    return {"data": str(work.resolve()), **(json.loads(path.read_text()) if path.exists() else {})}


def write_sets(work: Path, sets: dict[str, str]) -> None:
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / (SETS + ".tmp")
    tmp.write_text(json.dumps(sets, indent=1, sort_keys=True) + "\n")
    tmp.replace(work / SETS)


def parse_set(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected VAR=VALUE")
    return name, value


def set_args(sets: dict[str, str]) -> list[str]:
    return [x for k, v in sorted(sets.items()) for x in ("--set", f"{k}={v}")]


def config(a: argparse.Namespace, sets: dict[str, str]) -> Config:
    return load_config(a.config, sets)


# ---- sizing (pure: tests/test_bench_recipe.py) ------------------------------------------------------

def training_sets(steps: int) -> dict[str, str]:
    """train_steps and the intervals the measured run used: four validations and checkpoints (the
    last at the end, not one step before it), twenty log lines."""
    if steps < 1:
        raise RecipeError(f"{steps} training steps: need at least one")
    return {"train_steps": str(steps), "train_save_every": str(math.ceil(steps / 4)),
            "train_log_every": str(max(1, steps // 20))}


def size_steps(steps_per_s: float, train_s: float) -> int:
    """What a training of `train_s` seconds reaches at `steps_per_s` (a rate measured on the card)."""
    return max(1, int(steps_per_s * train_s))


def size(a: argparse.Namespace) -> int:
    sets = read_sets(a.work)
    steps = a.steps or size_steps(a.steps_per_s, a.train_s)
    wanted = training_sets(steps)
    latest = outputs(config(a, sets), "train")[0] / "checkpoints" / "latest"
    if latest.exists() and sets.get("train_steps") not in (None, wanted["train_steps"]) and not a.force:
        raise RecipeError(f"{latest} exists: a training of {sets['train_steps']} steps is under way, and its learning "
                          f"rate schedule is sized for them; --force sizes it again (the resumed run then follows the new "
                          "total's schedule from where it is)")
    write_sets(a.work, {**sets, **wanted})
    how = f"--steps {steps}" if a.steps else f"{a.steps_per_s:g} steps/s x {a.train_s:.0f} s"
    print(f"bench/recipe: {steps} training steps ({how}); " + " ".join(set_args(wanted)))
    return 0


# ---- one device call --------------------------------------------------------------------------------

def eagle3(*argv: str) -> list[str]:
    return [sys.executable, "-m", "console", *argv]


def walk_argv(a: argparse.Namespace, sets: dict[str, str]) -> list[str]:
    """The call's one command: the walk, under a deadline, or stopped waiting at the budget with
    the phases left running (SIGINT: `run --all` stops waiting, the phases go on)."""
    which = [a.phase, "--wait"] if a.phase else ["--all", "--parallel", str(a.parallel)]
    argv = eagle3("run", str(a.config), *which, *set_args(sets))
    if a.until:
        argv += ["--until", a.until]
    if a.leave_running:  # and an earlier call's deadline, which the state dir keeps, cleared
        argv = ["timeout", "-s", "INT", "-k", "60", str(int(a.budget_s)), *argv, "--until", "off"]
    return argv


def call(a: argparse.Namespace) -> int:
    sets = {**read_sets(a.work), **dict(a.set)}
    write_sets(a.work, sets)
    log = Log(a.result, append=not a.first)
    if a.first:
        log(f"# bench/recipe.py on the device: configs/examples/smollm2-h200.yaml through eagle3 run; commit "
            f"{commit(a.commit, a.result)}")
    argv = walk_argv(a, sets)
    log(f"\n## call {a.label}, {utc_now()}: " + " ".join(argv).replace(sys.executable, "python"))
    walk_log = a.work / "logs" / f"call-{a.label}.log"
    walk_log.parent.mkdir(parents=True, exist_ok=True)
    with open(walk_log, "a") as out:
        rc = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    log(f"the walk ended with exit {rc} ({WALK_ENDS.get(rc, 'see ' + str(walk_log))}), {utc_now()}")
    record_state(a, sets, log)
    report(a, sets, log)
    return 0


WALK_ENDS = {0: "every phase done", 1: "a phase blocked or failed", 2: "bad arguments or config",
             3: "stopped at the deadline: the next call resumes", 124: "the budget ran out: the walk stopped waiting, the phases go on",
             130: "left running: the phases go on"}


def record_state(a: argparse.Namespace, sets: dict[str, str], log: Log) -> None:
    for title, argv in (("eagle3 status --json", eagle3("status", str(a.config), "--json", *set_args(sets))),
                        (f"eagle3 journal -n {JOURNAL_LINES}",
                         eagle3("journal", str(a.config), "-n", str(JOURNAL_LINES), *set_args(sets)))):
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
        log(f"### {title} (exit {done.returncode})")
        log((done.stdout + done.stderr).rstrip())


# ---- the report, from the typed records -------------------------------------------------------------

def outputs(cfg: Config, phase: str) -> list[Path]:
    return [cfg.resolve(p) for p in cfg.phase(phase).outputs]


def rates(values: tuple[float, ...] | None) -> str:
    return "/".join(f"{v:.2f}" for v in values or ()) or "-"


def lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def report(a: argparse.Namespace, sets: dict[str, str], log: Log) -> None:
    cfg = config(a, sets)
    log("### figures (pipeline.records)")
    split = outputs(cfg, "split")[0]
    if (split / "train.jsonl").exists():
        log(f"split: {lines(split / 'train.jsonl'):,} training records, " + ", ".join(
            f"{lines(p):,} {p.stem}" for p in sorted(split.glob("heldout-*.jsonl"))))
    regen_stats = outputs(cfg, "regenerate")[1]
    if regen_stats.exists():
        r = read_regen_stats(regen_stats)
        log(f"regenerate: {r.status}, {r.records_out:,} of {r.wanted:,} records, {r.generated_tokens:,} tokens in "
            f"{r.seconds:.0f} s ({r.generated_tokens / max(r.seconds, 1e-9):,.0f} tokens/s), failures "
            f"{r.failures or 'none'}, {r.loops_cut:,} looping answers cut ({r.loop_tokens_cut:,} tokens)")
    synth_stats = outputs(cfg, "synthesize")[1]
    if synth_stats.exists():
        y = read_synth_stats(synth_stats)
        log(f"synthesize: {y.status}, {y.records_out:,} of {y.wanted:,} records from {y.asked:,} asked, "
            f"{y.generated_tokens:,} tokens in {y.seconds:.0f} s ({y.generated_tokens / max(y.seconds, 1e-9):,.0f} "
            f"tokens/s); dropped " + (", ".join(f"{k} {v:,}" for k, v in sorted(y.dropped.items())) or "none")
            + f"; {y.loops_cut:,} looping answers cut")
    merge_stats = outputs(cfg, "merge")[1]
    if merge_stats.exists():
        m = read_merge_stats(merge_stats)
        log(f"merge: {m.records:,} records, {m.tokens:,} tokens, {m.loss_tokens:,} learnt, {m.truncated} cut at "
            f"{m.max_len}; by source: " + "; ".join(
                f"{Path(k).name} {v.records:,} records, {v.tokens:,} tokens, {v.loss_tokens:,} learnt"
                for k, v in m.sources.items()))
    summary = outputs(cfg, "train")[0] / "summary.json"
    if summary.exists():
        t = read_summary(summary)
        val = t.val.acc if t.val else None
        resumed = f", resumed from step {t.resumed_from}" if t.resumed_from else ""
        log(f"train: {t.steps:,} of {t.total_steps:,} steps{' (stopped)' if t.stopped else ''}{resumed}, "
            f"{t.tokens:,} real tokens seen; this session {t.tokens_this_session:,} in {t.seconds:.0f} s "
            f"({t.tokens_per_s or 0:,.0f} tokens/s); loss {t.loss:.3f}, acc {rates(t.acc)}, val acc {rates(val)}"
            + (f", peak GPU {t.peak_gpu_bytes / 2**30:.1f} GiB" if t.peak_gpu_bytes else ""))
    for phase in (p.id for p in cfg.phases if p.id.startswith("evaluate-")):
        path = outputs(cfg, phase)[0]
        if path.exists():
            e = read_report(path)
            log(f"{phase}: acceptance length {e.acceptance_length:.3f} at {e.num_steps} draft steps, accept rate "
                f"per position {rates(e.accept_rate)}, {e.prompts} prompts, {e.verify_rounds} rounds")


def shot(a: argparse.Namespace) -> int:
    """The console attached to the run, as an SVG (console/ui/app.py's headless screenshot)."""
    env = {**os.environ, "EAGLE3_SCREENSHOT": str(a.svg), "EAGLE3_SCREENSHOT_SIZE": a.size,
           "EAGLE3_SCREENSHOT_AFTER": str(a.after)}
    done = subprocess.run(eagle3("console", str(a.config), *set_args(read_sets(a.work))), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=a.after + 240, check=False)
    print(f"bench/recipe: {a.svg}: console exit {done.returncode} {done.stderr.strip()[-300:]}")
    return done.returncode


def report_only(a: argparse.Namespace) -> int:
    sets = read_sets(a.work)
    report(a, sets, Log(a.result, append=True))
    return 0


# ---- main -------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG, help="the recipe's config (default: smollm2-h200.yaml)")
    modes = p.add_subparsers(dest="mode", required=True)
    s = modes.add_parser("size", help="set train_steps from a rate and a time, or as given")
    s.add_argument("--steps", type=int, default=0, help="the training's steps, as given")
    s.add_argument("--steps-per-s", type=float, default=4.6,
                   help="a rate measured on this card (default 4.6: the H200's 5.05 of recipe-h200.txt, less a margin)")
    s.add_argument("--train-s", type=float, default=600, help="seconds the plan leaves for training (default 600)")
    s.add_argument("--force", action="store_true", help="size again though a training is under way")
    c = modes.add_parser("call", help="one device call: eagle3 run --all, then status, journal and figures")
    c.add_argument("--label", required=True, help="the call's name in the result (1, 2, 3)")
    c.add_argument("--phase", help="run this phase alone (eagle3 run CONFIG PHASE --wait), not the walk")
    c.add_argument("--result", type=Path, required=True, help="the run's result file (appended to)")
    c.add_argument("--first", action="store_true", help="the run's first call: the result file starts here")
    c.add_argument("--set", type=parse_set, action="append", default=[], metavar="VAR=VALUE",
                   help="a config variable for this and every later call (kept in WORK/recipe-sets.json)")
    c.add_argument("--until", help="the walk's deadline (eagle3 run --until: 9m, 14:05)")
    c.add_argument("--leave-running", action="store_true",
                   help="interrupt the walk at --budget-s and leave its phases running")
    c.add_argument("--budget-s", type=float, default=530, help="with --leave-running: seconds the walk is given")
    c.add_argument("--parallel", type=int, default=4, help="phases at once (default 4: the four evaluations)")
    c.add_argument("--commit", help="the commit named at the top (the device's tree has no .git)")
    r = modes.add_parser("report", help="the figures so far, from the typed records")
    r.add_argument("--result", type=Path, help="also append them here")
    v = modes.add_parser("shot", help="an SVG of the console attached to the run")
    v.add_argument("--svg", type=Path, required=True, help="the picture to write")
    v.add_argument("--size", default="160x48", help="COLSxROWS (default 160x48)")
    v.add_argument("--after", type=float, default=8, help="seconds of the console's life first (default 8)")
    for sub in (s, c, r, v):
        sub.add_argument("--work", type=Path, required=True, help="the run's folder: the config's data and the sets")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.mode == "call" and bool(a.until) == a.leave_running:
        print("bench/recipe: error: a call is either --until WHEN or --leave-running", file=sys.stderr)
        return 2
    try:
        return {"size": size, "call": call, "report": report_only, "shot": shot}[a.mode](a)
    except RecipeError as e:
        print(f"bench/recipe: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
