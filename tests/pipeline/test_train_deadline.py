"""The demo's train phase under a deadline (`eagle3 run --all --until`): stopped mid-run, it keeps
its checkpoint, reads stopped at the deadline, and the next `run --all` resumes it to the very
weights an uninterrupted run ends with."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file
from stage_call import call_stage

from console.cli import main
from console.cli.edge import EXIT_DEADLINE, EXIT_OK
from console.core.config.loader import load_config
from pipeline.events import iter_events

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
STEPS = 6  # each step is seconds on a loaded 2-core machine (4096 padded tokens, TTT 3)


def demo_train_config(root: Path) -> Path:
    """configs/demo.yaml with its train phase alone, word for word but for its needs and the
    check that extract wrote the store (there is no extract phase here)."""
    text = DEMO.read_text()
    head, phases = text.split("\nphases:\n")
    train = "  - id: train\n" + phases.split("  - id: train\n")[1].split("\n  - id: ")[0] + "\n"
    for line in ("    needs: [extract]\n", "      - fresh: ${store}\n        name: store-is-what-extract-wrote\n"):
        assert line in train
        train = train.replace(line, "")
    root.mkdir(parents=True)
    cfg = root / "demo.yaml"
    cfg.write_text(head + "\nphases:\n" + train)
    return cfg


def sets(cfg: Path, store: Path, target: Path) -> dict[str, str]:
    return {k: str(v) for k, v in {"workdir": cfg.parent / "work", "store": store, "target": target,
                                   "train_steps": STEPS}.items()}


def cli(cfg: Path, store: Path, target: Path, *args: str) -> int:
    return main([args[0], str(cfg), *args[1:], *(f"--set={k}={v}" for k, v in sets(cfg, store, target).items())])


def weights(cfg: Path) -> dict:
    run = cfg.parent / "work" / "train"
    latest = (run / "checkpoints" / "latest").read_text().strip()
    return load_file(run / "checkpoints" / latest / "model.safetensors")


def trained_steps(cfg: Path) -> int:
    steps = [e.get("step") for ev in (cfg.parent / "work" / "state" / "runs" / "train").glob("*/events.jsonl")
             for e in iter_events(ev) if e.kind == "metric" and e.get("name") == "loss"]
    return max(steps, default=0)


def phase_status(cfg: Path, run: Callable[..., int], capsys) -> dict:
    capsys.readouterr()
    run("status", "--json")
    return {p["phase"]: p for p in json.loads(capsys.readouterr().out)["phases"]}["train"]


@pytest.mark.slow  # three trainings of the demo's phase: about 3 minutes on a loaded 2-core machine
def test_until_stops_demo_train_which_resumes_to_the_weights_of_an_uninterrupted_run(
        reference_store, tiny_target, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    whole = demo_train_config(tmp_path / "whole")  # the uninterrupted run: the phase's own argv, in this worker
    train = load_config(whole, sets(whole, reference_store, tiny_target)).phase("train")
    done = call_stage("train", train.argv[3:], cwd=whole.parent)
    assert done.returncode == 0, done.stderr

    cut = demo_train_config(tmp_path / "cut")

    def run(*args: str) -> int:
        return cli(cut, reference_store, tiny_target, *args)

    monkeypatch.setenv("EAGLE3_TRAIN_STEP_DELAY", "0.3")  # the launcher passes it on: time to stop it mid-run
    assert run("run", "train") == EXIT_OK
    give_up = time.monotonic() + 240
    while trained_steps(cut) < 2:
        assert time.monotonic() < give_up, "train never reached step 2"
        time.sleep(0.1)  # wait-ok: polling the phase's events file, under a deadline
    assert run("run", "--all", "--until", "1s", "--grace", "60") == EXIT_DEADLINE
    stopped = phase_status(cut, run, capsys)
    assert stopped["state"] == "stopped" and stopped["exit_code"] == 3  # train's checkpoint-and-exit on SIGTERM
    assert "stopped at the deadline" in stopped["reason"]
    saved = int((cut.parent / "work" / "train" / "checkpoints" / "latest").read_text().strip().split("_")[1])
    assert 2 <= saved < STEPS

    monkeypatch.delenv("EAGLE3_TRAIN_STEP_DELAY")
    assert run("run", "--all") == EXIT_OK, capsys.readouterr().err
    assert phase_status(cut, run, capsys)["state"] == "done"
    resumed, reference = weights(cut), weights(whole)
    assert sorted(resumed) == sorted(reference)
    for name, tensor in reference.items():
        assert resumed[name].dtype == tensor.dtype and bool((resumed[name] == tensor).all()), name
