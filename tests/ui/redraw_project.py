"""A finished pipeline shaped like the demo (its eight phases, ids, titles and needs), each
phase a program that exits at once, for the tests of what an open console draws when the
project changes under it: an `eagle3 set` from another shell, a rerun of some phases.

`finished_template(root)` runs every phase once and pins each run's start and end, so the
durations on screen are the same on every run of the tests; `pin_runs` pins them again after a
rerun. The first phase's command reads the `limit` variable: setting it makes every phase stale."""

from __future__ import annotations

from pathlib import Path

from ui_harness import finish

from console.core.lifecycle.project import Project
from console.core.runs.manager import latest_run
from console.core.runs.rundir import ExitInfo

T0 = 1_750_000_000.0

PHASES = (
    ("demo-assets", "Build demo datasets, tokenizer and target", ""),
    ("regenerate", "Regenerate arithmetic's answers with the target (HF backend)", "demo-assets"),
    ("merge", "Merge and shuffle the datasets", "regenerate"),
    ("clean", "Delete the old hidden-state store", "merge"),
    ("extract", "Extract hidden states from the target", "clean"),
    ("train", "Train the EAGLE-3 drafter", "extract"),
    ("export", "Export the drafter for SGLang", "train"),
    ("evaluate", "Measure acceptance length", "export"),
)
# Seconds each phase took, as the durations column shows them.
DURATIONS = {"demo-assets": 83, "regenerate": 26, "merge": 6, "clean": 0, "extract": 41, "train": 26,
             "export": 3, "evaluate": 129}


def config_text() -> str:
    lines = ["name: demo", "vars:", "  workdir: ./work", '  limit: "400"', "state_dir: ${workdir}/state",
             'volumes: ["${workdir}"]', "phases:"]
    for pid, title, need in PHASES:
        argv = '[python3, -c, "pass", "${limit}"]' if pid == "demo-assets" else '[python3, -c, "pass"]'
        lines += [f"  - id: {pid}", f"    title: {title}", f"    run: {argv}"]
        if need:
            lines.append(f"    needs: [{need}]")
    return "\n".join(lines) + "\n"


def pin_runs(project: Project, *phases: str) -> None:
    """Each phase's latest run started and ended at fixed times, `DURATIONS` apart."""
    state = project.config.state_dir
    for i, pid in enumerate(phases):
        run = latest_run(state, pid)
        assert run is not None, pid
        pid_info, ended = run.read_pid(), run.read_exit()
        assert pid_info is not None and ended is not None, pid
        start = T0 + 200 * i
        run.write_pid(type(pid_info)(**{**pid_info.to_json(), "started_at": start}))
        run.write_exit(ExitInfo(code=ended.code, signal=ended.signal, ended_at=start + DURATIONS[pid]))


def finished_template(root: Path) -> Path:
    """A config at `root` whose every phase is done, with pinned times; returns its path."""
    (root / "work").mkdir(parents=True, exist_ok=True)
    cfg = root / "cfg.yaml"
    cfg.write_text(config_text())
    project = Project.load(cfg)
    ids = [pid for pid, _, _ in PHASES]
    finish(project, *ids)
    pin_runs(project, *ids)
    return cfg
