"""Config-shaped files that are not what they claim: a FIFO or a device where the config or
its `.local.yaml` overlay should be is refused at once with exit 2 naming it (not a command
that blocks for ever or reads until memory runs out), and a NUL in an overlay value is
refused naming the file, line and key. Each command runs in a child with a deadline and a
memory ceiling, so a regression fails here instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.core.config.overlay import overlay_path
from tests.test_cli_saved_overrides import CFG  # a config with vars, a state dir and one phase

DEADLINE_S = 120


def _eagle3(*argv: str) -> subprocess.CompletedProcess:
    def ceiling() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        return subprocess.run([sys.executable, "-m", "console", *argv], capture_output=True, text=True,
                              timeout=DEADLINE_S, preexec_fn=ceiling, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"eagle3 {' '.join(argv)} still waiting after {DEADLINE_S} s")


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "files.yaml"
    p.write_text(CFG)
    return p


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_config_that_is_not_a_file_is_exit_2_naming_it(kind, tmp_path):
    path = tmp_path / "pipe.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    done = _eagle3("status", str(path))
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr and "not a regular file" in done.stderr


def test_an_overlay_that_is_a_fifo_is_exit_2_naming_it(cfg):
    os.mkfifo(overlay_path(cfg))
    done = _eagle3("status", str(cfg))
    assert done.returncode == 2, done.stderr
    assert str(overlay_path(cfg)) in done.stderr and "not a regular file" in done.stderr


def test_a_nul_in_an_overlay_value_is_refused_naming_file_line_and_key(cfg, capsys):
    overlay_path(cfg).write_text('vars:\n  steps: "4\\x000"\n')
    assert main(["status", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert str(overlay_path(cfg)) in err and ":2:" in err and "vars.steps" in err and "NUL" in err


@pytest.mark.parametrize("where", ["config", "overlay"])
def test_a_raw_nul_byte_is_a_config_error_naming_file_and_line_not_an_internal_error(where, cfg, capsys):
    """A raw NUL (not the escape `\\x00`) stops PyYAML's reader before any node exists; it
    used to reach the operator as `internal error: ReaderError` with no file and no line."""
    if where == "config":
        lines = CFG.splitlines(keepends=True)
        lines[2] = lines[2].rstrip("\n") + "\x00\n"
        cfg.write_text("".join(lines))
        file = cfg
    else:
        file = overlay_path(cfg)
        file.write_text('vars:\n  steps: "4\x000"\n')
    assert main(["status", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and "ReaderError" not in err, err
    assert f"{file}:{3 if where == 'config' else 2}:" in err and "U+0000" in err, err
