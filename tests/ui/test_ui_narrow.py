"""80x24 first: what a new user stepping through the demo found clipped, each as a story."""

from __future__ import annotations

from textual.app import App, ComposeResult

from console.core.checks.result import CheckResult
from console.core.telemetry.samples import GpuReading, HostReading, ShmReading
from console.ui.components.checks.checks_view import render_results
from console.ui.components.machine.gpu_panel import GpuPanel, GpuView
from console.ui.components.machine.host_panel import HostPanel
from console.ui.components.machine.shm_panel import ShmPanel
from console.ui.screens.help_screen import KEY_W, KEYS, help_text

DEMO_CHECKS = [
    CheckResult("dataset-is-what-merge-wrote", "fresh", "error", "fail",
                "the dataset changed after merge wrote it: rerun merge", {"path": "./.eagle3-demo/data/train.jsonl"}),
    CheckResult("needs-done", "needs", "error", "pass", "merge, clean are done"),
    CheckResult("python_import:transformers", "python_import", "error", "pass", "transformers 4.57 imports"),
    CheckResult("python_import:tokenizers", "python_import", "error", "pass", "tokenizers imports"),
    CheckResult("free_space:./.eagle3-demo", "free_space", "error", "pass", "81 GB free, 200 MB needed"),
]


def test_the_preflight_pane_never_breaks_a_check_name_mid_word() -> None:
    names = {r.name for r in DEMO_CHECKS}
    for width in (24, 26, 34, 60):
        rows = render_results(DEMO_CHECKS, collapse_passing=True, width=width).plain.split("\n")
        for row in rows:
            assert len(row) <= width, (width, row)
            if row.startswith("    "):  # evidence: a path keeps its end
                assert not row.endswith("dem…"), row
                continue
            if row.startswith("  "):  # the passing names under their count
                shown = [w.strip() for w in row.strip().rstrip(",").split(", ")]
            elif row.startswith("✓"):
                shown = row.split("passed: ", 1)[1].split("  e: all")[0].split(", ") if "passed:" in row else []
            else:
                shown = [row.split()[1]]
            for word in shown:
                # Whole, or cut once at its end with an ellipsis, at a hyphen, never inside a word.
                stem = word[:-1] if word.endswith("…") else None
                if stem is None:
                    assert word in names, (width, row)
                else:
                    assert any(n.startswith(stem) and n[len(stem):][:1] in "-:" for n in names), (width, row)
        assert rows[0].startswith("✗ dataset-is-what")
        assert any("4 passed" in r and "e: all" in r for r in rows) and "needs-done" in "".join(rows)


def test_the_no_driver_gpu_line_keeps_not_found() -> None:
    error = "NVIDIA driver not found (libnvidia-ml.so.1): NVML Shared Library Not Found"
    panel = GpuPanel()
    panel.view = GpuView(GpuReading(0.0, error=error))
    rows = panel.render().wrap(43)
    assert panel.get_content_height(None, None, 43) == len(rows) == 3
    assert rows[-1].plain.strip().endswith("Not Found")


class Storage(App[None]):
    CSS = "Screen { layout: vertical; } #box { width: 36; height: auto; padding: 0 0 0 1; }"

    def compose(self) -> ComposeResult:
        from textual.containers import Vertical

        with Vertical(id="box"):
            yield ShmPanel(id="shm")
            yield HostPanel(id="host")


async def test_at_80_columns_shm_is_one_row_and_the_host_line_is_there() -> None:
    app = Storage()
    async with app.run_test(size=(80, 24)) as pilot:
        shm, host = app.query_one(ShmPanel), app.query_one(HostPanel)
        shm.show(ShmReading(0.0, total=550_000_000_000, used=70_000_000_000, free=480_000_000_000,
                            dump_path="/dev/shm/sglang", dump_files=102, dump_bytes=1_000_000_000))
        host.show(HostReading(0.0, cpu_percent=37.0, mem_used=3_700_000_000, mem_total=25_000_000_000,
                              load=(1.5, 1.2, 0.9), cpu_count=2))
        await pilot.pause()
        width = shm.content_region.width
        line = shm.render().plain
        assert "\n" not in line and len(line) <= width and "dump 102 files 1.0G" in line, line
        text = host.render().plain
        assert host.display and len(text) <= width and "mem" in text and "load 1.5" in text, text


def test_help_wraps_under_its_text_not_at_column_zero() -> None:
    rows = help_text(60).plain.split("\n")
    continued = [r for r in rows if r.startswith(" " * KEY_W) and r.strip()]
    assert continued, rows  # some descriptions need a second line at 60 columns
    assert all(len(r) <= 60 for r in rows)
    for key, what in KEYS:
        first = next(r for r in rows if r.startswith(f"  {key:<{KEY_W - 2}}"))
        assert what.startswith(first[KEY_W:].strip()[:10])
