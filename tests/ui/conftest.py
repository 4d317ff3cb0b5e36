"""Fixtures for the UI tests (helpers live in ui_harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_harness import stop_all, write_config

from console.core.lifecycle.project import Project


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    proj = Project.load(write_config(tmp_path))
    yield proj
    stop_all(proj)
