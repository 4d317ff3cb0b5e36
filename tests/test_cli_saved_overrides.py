"""Remembered overrides: an operator who tuned `steps` with `--set` once saves it with
`eagle3 set`, and every later plain command (status, run --all, the console) uses it, so a
phase done with those values stays done instead of turning stale."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from console.cli import main
from console.core.config.overlay import MAX_BYTES, overlay_path, write_saved
from console.core.lifecycle.project import Project

CFG = textwrap.dedent("""\
    name: tuned
    vars:
      work: ./work
      steps: "10"
    state_dir: ${work}/state
    phases:
      - id: train
        run: [python, -c, "import sys; open('work/steps.txt', 'w').write(sys.argv[1])", "${steps}"]
        verify:
          - exists: ${work}/steps.txt
    """)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    p = tmp_path / "tuned.yaml"
    p.write_text(CFG)
    return p


def _states(cfg: Path, capsys) -> dict[str, str]:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    main(["status", str(cfg), "--json"])
    doc = json.loads(capsys.readouterr().out)
    return {p["phase"]: p["state"] for p in doc["phases"]} | {"saved": doc["saved_overrides"]}


def test_a_saved_override_applies_to_every_command_so_the_tuned_phase_stays_done(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "train", "--wait", "--set", "steps=40"]) == 0
    assert (cfg.parent / "work" / "steps.txt").read_text() == "40"
    assert _states(cfg, capsys)["train"] == "stale"  # the YAML's 10 is not what ran

    assert main(["set", str(cfg), "steps=40"]) == 0
    assert "saved steps=40" in capsys.readouterr().out
    assert overlay_path(cfg).exists() and overlay_path(cfg).name == "tuned.local.yaml"
    assert _states(cfg, capsys) == {"train": "done", "saved": {"steps": "40"}}
    main(["status", str(cfg)])
    assert "saved overrides: steps=40" in capsys.readouterr().out
    assert main(["run", str(cfg), "--all"]) == 0
    assert "train: done, skipped" in capsys.readouterr().out
    assert Project.load(cfg).config.saved_overrides == {"steps": "40"}  # what the console header reads
    assert Project.load(cfg, {"steps": "7"}).config.vars["steps"] == "7"  # --set still wins

    assert main(["set", str(cfg)]) == 0
    assert "steps=40" in capsys.readouterr().out
    assert main(["set", str(cfg), "--clear", "steps"]) == 0
    assert not overlay_path(cfg).exists()
    assert _states(cfg, capsys) == {"train": "stale", "saved": {}}

    main(["journal", str(cfg)])
    journal = capsys.readouterr().out
    assert "saved overrides: steps=40" in journal and "saved overrides: cleared steps" in journal


def test_an_unknown_variable_is_refused_with_did_you_mean_and_nothing_is_written(cfg: Path, capsys) -> None:
    assert main(["set", str(cfg), "stpes=40"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eagle3: ") and "no variable 'stpes'" in err and "did you mean 'steps'?" in err
    assert not overlay_path(cfg).exists()
    assert main(["set", str(cfg), "--clear", "steps"]) == 2
    assert "not a saved override" in capsys.readouterr().err


def test_a_bad_overlay_is_a_config_error_naming_file_line_and_key_and_stays_fixable(cfg: Path, capsys) -> None:
    overlay = overlay_path(cfg)
    overlay.write_text("vars:\n  steps: '40'\n  old_knob: '1'\n")  # a variable the config dropped
    assert main(["status", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"{overlay}:3: vars.old_knob: no variable 'old_knob'" in err
    assert f"eagle3 set {cfg} --clear old_knob" in err
    assert main(["set", str(cfg), "--clear", "old_knob"]) == 0
    assert _states(cfg, capsys)["saved"] == {"steps": "40"}

    overlay.write_text("vars:\n  steps: {deep: [1]}\n")
    assert main(["status", str(cfg)]) == 2
    assert f"{overlay}:2: vars.steps: expected a text value" in capsys.readouterr().err
    overlay.write_text("phases: []\n")
    assert main(["status", str(cfg)]) == 2
    assert "holds only `vars:`" in capsys.readouterr().err
    overlay.write_text("vars:\n" + "".join(f"  v{i}: '{'x' * 60}'\n" for i in range(MAX_BYTES // 60)))
    assert main(["status", str(cfg)]) == 2
    assert "an overrides file is at most" in capsys.readouterr().err


def test_a_saved_value_is_kept_exactly_and_written_atomically(cfg: Path, capsys) -> None:
    tricky = "a b: 'c' \"d\" ${work}/x #not-a-comment"
    assert main(["set", str(cfg), f"steps={tricky}"]) == 0
    assert Project.load(cfg).config.saved_overrides == {"steps": tricky}
    assert Project.load(cfg).config.vars["steps"] == "a b: 'c' \"d\" ./work/x #not-a-comment"
    leftovers = [p.name for p in cfg.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == [] and overlay_path(cfg).stat().st_mode & 0o077 == 0


def test_a_symlinked_overlay_stays_a_link_and_its_file_keeps_its_mode(cfg: Path, capsys) -> None:
    """An overlay kept elsewhere (a dotfiles repo, a shared folder) and linked beside the config:
    `set` writes the file the link names, and its mode, never a new 0600 file over the link."""
    shared = cfg.parent / "shared"
    shared.mkdir()
    real = shared / "tuned.overrides.yaml"
    real.write_text("vars:\n  steps: '20'\n")
    real.chmod(0o640)
    overlay_path(cfg).symlink_to(real)
    assert main(["set", str(cfg), "steps=40"]) == 0
    assert overlay_path(cfg).is_symlink() and overlay_path(cfg).resolve() == real
    assert oct(real.stat().st_mode & 0o777) == oct(0o640)
    assert _states(cfg, capsys)["saved"] == {"steps": "40"}
    assert main(["set", str(cfg), "--clear", "steps"]) == 0  # the last one cleared: the link stays
    assert overlay_path(cfg).is_symlink() and _states(cfg, capsys)["saved"] == {}


def test_an_overlay_keeps_the_mode_it_was_given(cfg: Path, capsys) -> None:
    overlay_path(cfg).write_text("vars:\n  steps: '20'\n")
    overlay_path(cfg).chmod(0o644)
    assert main(["set", str(cfg), "steps=40"]) == 0
    assert oct(overlay_path(cfg).stat().st_mode & 0o777) == oct(0o644)


@pytest.mark.parametrize("how", ["read-only", "read-only link", "dangling link"])
def test_a_read_only_overlay_or_a_dangling_link_is_refused_with_the_reason_and_left_as_it_is(
        how: str, cfg: Path, capsys) -> None:
    overlay = overlay_path(cfg)
    real = cfg.parent / "elsewhere.yaml"
    if how == "read-only":
        real = overlay
    else:
        overlay.symlink_to(real)
    if how != "dangling link":
        real.write_text("vars:\n  steps: '20'\n")
        real.chmod(0o444)
    capsys.readouterr()
    assert main(["set", str(cfg), "steps=40"]) == 2
    err = capsys.readouterr().err
    assert str(overlay) in err and ("read-only (mode 0444)" in err if how != "dangling link" else
                                    "does not exist" in err), err
    assert overlay.is_symlink() == (how != "read-only")
    if how != "dangling link":
        assert real.read_text() == "vars:\n  steps: '20'\n" and real.stat().st_mode & 0o777 == 0o444
        assert main(["set", str(cfg), "--clear", "steps"]) == 2 and real.exists()
    else:
        assert not real.exists()


def test_a_run_verifies_with_the_values_it_started_with_whatever_the_overlay_becomes(tmp_path: Path, capsys) -> None:
    (tmp_path / "work").mkdir()
    cfg = tmp_path / "tuned.yaml"
    cfg.write_text(CFG.replace(
        '''run: [python, -c, "import sys; open('work/steps.txt', 'w').write(sys.argv[1])", "${steps}"]''',
        '''run: [python, -c, "import os, sys, time\\nwhile not os.path.exists('work/go'): time.sleep(0.05)\\nopen('work/steps.txt', 'w').write(sys.argv[1])", "${steps}"]'''))  # wait-ok: the phase waits for the test's go
    assert main(["set", str(cfg), "steps=40"]) == 0
    assert main(["run", str(cfg), "train"]) == 0
    overlay_path(cfg).write_text("vars:\n  gone_knob: '1'\n")  # edited by hand mid-run, wrongly
    (tmp_path / "work" / "go").touch()
    from console.core.config.loader import load_config
    from console.core.runs import manager

    state = load_config(cfg, saved={}).state_dir
    rd = manager.latest_run(state, "train")
    deadline = time.monotonic() + 60
    while manager.run_status(rd).state in ("running", "verifying"):
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.05)  # wait-ok: polling the run's end with a deadline
    assert (tmp_path / "work" / "steps.txt").read_text() == "40"
    assert manager.run_status(rd).state == "succeeded", rd.read_verify()


def test_set_with_save_on_any_command_remembers_the_values(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "train", "--wait", "--set", "steps=40", "--save"]) == 0
    assert "saved steps=40" in capsys.readouterr().err
    assert _states(cfg, capsys) == {"train": "done", "saved": {"steps": "40"}}
    assert main(["status", str(cfg), "--json", "--save"]) == 2  # nothing to save
    assert "--save remembers --set values" in capsys.readouterr().err
    assert main(["status", str(cfg), "--json", "--set", "stpes=1", "--save"]) == 2
    assert "did you mean 'steps'?" in capsys.readouterr().err
    assert _states(cfg, capsys)["saved"] == {"steps": "40"}


def test_status_watch_reads_values_saved_between_its_looks(cfg: Path, capsys, monkeypatch) -> None:
    import console.cli.status

    assert main(["run", str(cfg), "train", "--wait"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(console.cli.status.time, "sleep", lambda _s: write_saved(cfg, {"steps": "40"}))  # saved between looks
    assert main(["status", str(cfg), "--watch", "1", "--count", "2"]) == 1
    first, second = capsys.readouterr().out.split("(every 1s")[1:]
    assert " done " in first and " stale " in second and "saved overrides: steps=40" in second
