"""SVG snapshots of the main screen at 80x24 and 160x48: 8 fake GPUs (one failing its NVML
queries) with a 60-second history, fake volumes with a write-rate forecast, and a frozen
clock, so every run renders the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_harness import FROZEN, T0, AtTime, make_app, wait_for, write_config

from console.core.project import Project
from console.core.telemetry.fake import FakeDiskSource, FakeGpuSource
from console.ui.components.disk_panel import DiskPanel
from console.ui.components.gpu_panel import GpuPanel


def _app(tmp_path: Path, gpu=None):  # type: ignore[no-untyped-def]
    project = Project.load(write_config(tmp_path))
    return make_app(project, intervals=FROZEN, clock=lambda: T0 + 3600, gpu=gpu)


async def _settle(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    main = app.main_screen()
    await wait_for(pilot, lambda: main.statuses and main.query_one(GpuPanel).reading is not None
                   and main.query_one(DiskPanel).reading is not None, what="first reads")
    gpu = FakeGpuSource(n=8, failing=(3,))
    panel = main.query_one(GpuPanel)
    for k in range(1, 61):
        panel.show(gpu.read(t=T0 + k), {})
    disk = FakeDiskSource(volumes=("/data", "/scratch"))
    for k in range(0, 11):
        main._forecast.update(disk.read(t=T0 + 2 * k))
    reading = disk.read(t=T0 + 20)
    main._forecast.update(reading)
    main.query_one(DiskPanel).show(reading, {f.path: f for f in main._forecast.forecasts()}, {})
    await pilot.pause(0.2)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_app(tmp_path), terminal_size=size, run_before=_settle)


def test_no_driver_is_one_line(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gpu = FakeGpuSource(error="NVIDIA driver not found (libnvidia-ml.so.1): no such file")

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        main = pilot.app.main_screen()
        await wait_for(pilot, lambda: main.statuses and main.query_one(GpuPanel).reading is not None)
        await pilot.pause(0.2)

    assert snap_compare(_app(tmp_path, gpu=gpu), terminal_size=(80, 24), run_before=settle)


def test_blocked_dialog(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from console.ui.screens.blocked_dialog import BlockedDialog

    async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot)
        pilot.app.main_screen().query_one("#phases").select_id("gated")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, BlockedDialog), what="dialog")
        pilot.app.clear_notifications()
        await pilot.pause(0.2)

    assert snap_compare(_app(tmp_path), terminal_size=(80, 24), run_before=settle)


__all__ = ["AtTime"]
