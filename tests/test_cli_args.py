"""The command line's arguments as a newcomer types them: the phase after the options
(`eagle3 check CONFIG --set X=Y PHASE`), and a relative path given with `--set` from the
repository root, which resolves against the config's folder instead."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from console.cli import main

CFG = textwrap.dedent("""\
    name: args
    vars:
      work: ./work
      model: ./model
      steps: "10"
    state_dir: ${work}/state
    phases:
      - id: load
        run: [python, -c, "print('load')"]
        checks:
          - exists: ${model}
      - id: train
        run: [python, -c, "import sys; open('work/steps.txt', 'w').write(sys.argv[1])", "${steps}"]
      - id: gated
        run: [python, -c, "print('gated')"]
        checks:
          - exists: ${work}/a
          - exists: ${work}/b
          - exists: ${work}/c
    """)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    """A repository root with the config one folder down, as configs/examples/ is."""
    (tmp_path / "configs" / "work").mkdir(parents=True)
    (tmp_path / "configs" / "model").mkdir()
    (tmp_path / "models" / "mine").mkdir(parents=True)
    p = tmp_path / "configs" / "args.yaml"
    p.write_text(CFG)
    return p


def test_check_takes_the_phase_after_the_options(cfg: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["check", str(cfg), "--set", "steps=40", "train"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("train:") and "load:" not in out  # that one phase, not all of them
    assert main(["check", str(cfg), "--json", "load", "--set", "steps=40"]) == 0
    assert '"load"' in capsys.readouterr().out


def test_run_takes_the_phase_after_the_options(cfg: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["run", str(cfg), "--set", "steps=40", "--wait", "train"]) == 0
    assert (cfg.parent / "work" / "steps.txt").read_text() == "40"


def test_set_takes_assignments_after_clear(cfg: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["set", str(cfg), "steps=40"]) == 0
    assert main(["set", str(cfg), "--clear", "steps", "model=./model"]) == 0
    out = capsys.readouterr().out
    assert "cleared steps" in out and "saved model=./model" in out


def test_a_second_phase_is_still_refused(cfg: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["check", str(cfg), "load", "--set", "steps=40", "train"]) == 2
    assert "unrecognized arguments: train" in capsys.readouterr().err


def test_a_relative_set_path_typed_from_the_repository_root_says_where_it_resolved(
        cfg: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = cfg.parent.parent
    monkeypatch.chdir(root)
    assert main(["check", "configs/args.yaml", "--set", "model=models/mine", "load"]) == 1
    err = capsys.readouterr().err
    assert "--set model=models/mine" in err
    assert f"relative to the config's folder ({root / 'configs'})" in err
    assert f"{root / 'configs' / 'models' / 'mine'} does not exist" in err
    assert f"--set model={root / 'models' / 'mine'}" in err  # what to type instead
    assert main(["set", "configs/args.yaml", "model=models/mine"]) == 0  # saved, and said the same
    assert f"relative to the config's folder ({root / 'configs'})" in capsys.readouterr().err


def test_a_relative_set_path_that_resolves_says_nothing(cfg: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(cfg.parent.parent)
    assert main(["check", "configs/args.yaml", "--set", "model=../models/mine", "load"]) == 0
    assert "relative to the config's folder" not in capsys.readouterr().err


def test_the_override_hint_names_the_checks_that_fail_one_or_several(cfg: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["run", str(cfg), "gated"]) == 1
    err = capsys.readouterr().err
    assert "override one" not in err  # overriding one of three starts nothing
    assert "override all 3 (each with --override NAME): --override exists:./work/a --override exists:./work/b" in err
    assert main(["run", str(cfg), "load", "--set", "model=./absent"]) == 1
    err = capsys.readouterr().err
    assert "fix it, or override it: --override exists:./absent --reason TEXT" in err
