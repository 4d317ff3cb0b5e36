"""Builders the core tests share: a Config without a YAML file, a CheckContext on it,
and a bounded wait. Imported by name (pytest puts this folder on sys.path)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.model.config import Config, Phase


def config_for(root: Path, *phases: Phase, fingerprint: str = "fp",
               overrides: Mapping[str, str] | None = None) -> Config:
    """A config whose folder is `root` and whose state lives in `root/state`."""
    return Config(path=root / "pipeline.yaml", name="t", vars={}, state_dir=root / "state", volumes=(),
                  phases=tuple(phases), fingerprint=fingerprint, overrides=dict(overrides or {}))


def ctx_for(root: Path, phases: Iterable[Phase] = (), phase: Phase | None = None) -> CheckContext:
    """A check context on `root`; `phase` is the phase the checks belong to (also listed)."""
    listed = tuple(phases) or ((phase,) if phase is not None else ())
    return CheckContext(config_for(root, *listed), phase=phase)


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """The first truthy value of `pred`, or AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)  # wait-ok: poll interval
    raise AssertionError(f"timed out waiting for {what}")
