"""The browser view: `eagle3 console CONFIG --serve [HOST:]PORT` through textual-serve,
loopback by default, read-only unless --serve-actions. The served page is checked over
HTTP on every run; a real headless Chromium renders it when one is installed
(`apt-get install chromium`; skipped otherwise, since CI should not install a browser)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ui_harness import make_app, select, wait_for, write_config

from console.core.project import Project
from console.ui.serve import ServeError, console_command, parse_address

REPO = Path(__file__).resolve().parents[2]


def test_address_defaults_to_loopback_and_is_bounded() -> None:
    assert parse_address("8080") == ("127.0.0.1", 8080)
    assert parse_address("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("http", "70000", "host:"):
        with pytest.raises(ServeError, match="--serve"):
            parse_address(bad)
    assert console_command("c.yaml", ["a=b"], None, actions=False).endswith("--set a=b --read-only")
    assert "--read-only" not in console_command("c.yaml", [], "eagle3-ansi", actions=True)


async def test_a_read_only_console_refuses_to_act(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project, read_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await select(pilot, app, "prep")
        for key in "rcvs":
            await pilot.press(key)
        await wait_for(pilot, lambda: sum("read-only view" in n.message for n in app._notifications) == 4,
                       what="four refusals")
        await app.workers.wait_for_complete()
    assert project.run_dir("prep") is None and not project.journal.read(events={"checks", "verify"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`eagle3 console CFG --serve 127.0.0.1:PORT` in its own process group."""

    def __init__(self, cfg: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = subprocess.Popen([sys.executable, "-m", "console", "console", str(cfg), "--serve",
                                      str(self.port)], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def page(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    return resp.read().decode()
            except OSError:
                assert self.proc.poll() is None, "the server exited"
                time.sleep(0.1)  # wait-ok: polling a condition with a deadline
        raise AssertionError(f"no page at {self.url}")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)


def test_the_served_page_is_textual_serve_on_loopback_and_read_only(tmp_path: Path) -> None:
    served = Served(write_config(tmp_path))
    try:
        html = served.page()
        assert 'class="textual-terminal"' in html
        assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws"' in html
        assert "eagle3 · uitest (read-only)" in html
    finally:
        served.close()


@pytest.mark.skipif(__import__("shutil").which("chromium") is None, reason="chromium is not installed")
def test_a_real_browser_shows_the_console(tmp_path: Path) -> None:
    from cdp import Browser

    cfg = write_config(tmp_path)
    Project.load(cfg).start("stream")
    served = Served(cfg)

    async def look() -> bytes:
        async with Browser() as browser:
            await browser.open(served.url)
            deadline = time.monotonic() + 60
            while not await browser.evaluate("document.body.classList.contains('-first-byte')"):
                assert time.monotonic() < deadline, "the console never sent its first byte to the page"
                await asyncio.sleep(0.1)
            # Settled: the same picture twice in a row, the intro dialog long gone.
            last, shot = b"", await browser.screenshot()
            while shot != last:
                assert time.monotonic() < deadline, "the page never settled"
                await asyncio.sleep(0.5)
                last, shot = shot, await browser.screenshot()
            return shot

    try:
        served.page()
        png = asyncio.run(look())
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a drawn console, not a blank page
        (tmp_path / "browser.png").write_bytes(png)
        keep = os.environ.get("EAGLE3_BROWSER_SCREENSHOT")
        if keep:
            Path(keep).write_bytes(png)
    finally:
        served.close()
        (tmp_path / "stream.stop").touch()
        from ui_harness import stop_all

        stop_all(Project.load(cfg))
