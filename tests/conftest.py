"""Suite-wide set-up."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# A suite started where Ctrl-C is ignored (under nohup, or as `cmd &` in a script) passes that on
# to every program it starts, and the Ctrl-C tests would wait out their deadlines on stages that
# never see the interrupt. Restore what a terminal gives; the handler is reset at each exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Shared test modules at the suite's top (record_samples.py) import from any folder's tests, and
# `from tests.x import` works under `pytest` as under `python -m pytest` (which adds the checkout).
sys.path.insert(0, str(TESTS))
if str(TESTS.parent) not in sys.path:
    sys.path.insert(1, str(TESTS.parent))

# The files whose tests start stage programs (a torch and transformers import each, seconds of a
# core on a loaded machine), the recipe's whole pipeline first: they start first.
STAGE_HEAVY = (TESTS / "test_recipe_config.py", TESTS / "pipeline")


def _weight(path: Path) -> int:
    return next((i for i, heavy in enumerate(STAGE_HEAVY) if path == heavy or heavy in path.parents),
                len(STAGE_HEAVY))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long files first, so that the suite ends on the many short UI and core tests: with
    `-n 3 --dist loadfile --no-loadscope-reorder` (make test) no worker is left running a
    long file alone at the end while the others have nothing to do. A stable sort: each file's
    tests keep their order."""
    items.sort(key=lambda item: _weight(item.path))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test starts with torch (where loaded) on one thread, as the stage programs the suite
    starts are (OMP_NUM_THREADS=1): the workers share two cores, and torch's default of every
    core made a test that follows none that set it take 20 times as long on a loaded machine."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
