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
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ui_harness import Notices, make_app, select, wait_for, write_config

from console.core.lifecycle.project import Project
from console.ui.serve_rules import SESSION_ENV, ServeError, console_command, parse_address, same_origin

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


def test_only_a_page_of_the_servers_own_origin_may_open_a_session() -> None:
    mine = {"127.0.0.1", "localhost", "::1"}
    assert same_origin("http://127.0.0.1:8080", "127.0.0.1:8080", mine)
    assert same_origin("http://localhost:9090", "localhost:9090", mine)  # a tunnel to another local port
    assert same_origin("http://[::1]:8080", "[::1]:8080", mine)
    assert not same_origin("http://evil.example", "127.0.0.1:8080", mine)
    assert not same_origin("http://127.0.0.1:8081", "127.0.0.1:8080", mine)
    assert not same_origin("http://evil.example:8080", "evil.example:8080", mine)  # DNS rebinding
    assert not same_origin(None, "127.0.0.1:8080", mine)
    assert not same_origin("null", "127.0.0.1:8080", mine)


async def test_a_read_only_console_refuses_to_act(project) -> None:  # type: ignore[no-untyped-def]
    app = make_app(project, read_only=True)
    notices = Notices()
    async with app.run_test(size=(100, 30), message_hook=notices.hook) as pilot:
        await select(pilot, app, "prep")
        for key in "rcvs":
            await pilot.press(key)
        await wait_for(pilot, lambda: sum("read-only view" in text for text in notices.texts) == 4,
                       what="four refusals")
        await app.workers.wait_for_complete()
    assert project.run_dir("prep") is None and not project.journal.read(events={"checks", "verify"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_pids(server_pid: int) -> dict[str, int]:
    """The live processes that carry a session mark of this server, by mark."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        for item in env:
            if item.startswith(f"{SESSION_ENV}={server_pid}:".encode()) and state != "Z":
                found[item.split(b"=", 1)[1].decode()] = int(entry)
    return found


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


class Served:
    """`eagle3 console CFG --serve 127.0.0.1:PORT` in its own process group; `url` is the
    one it printed, with its token."""

    def __init__(self, cfg: Path, *extra: str) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "console", "console", str(cfg), "--serve",
                                      str(self.port), *extra], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, text=True)
        self.printed: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = wait_until(lambda: next((ln.strip() for ln in self.printed if "?token=" in ln), None),
                              60, "the URL the server prints", self.proc)
        self.token = self.url.rsplit("=", 1)[1]
        self.ws = f"ws://127.0.0.1:{self.port}/ws/{self.token}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.printed.append(line)

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
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass


def wait_until(pred, timeout: float, what: str, proc=None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        assert proc is None or proc.poll() is None, f"the server exited while waiting for {what}"
        time.sleep(0.05)  # wait-ok: polling a condition with a deadline
    raise AssertionError(f"timed out waiting for {what}")


def test_the_served_page_is_textual_serve_on_loopback_and_read_only(tmp_path: Path) -> None:
    served = Served(write_config(tmp_path))
    try:
        html = served.page()
        assert 'class="textual-terminal"' in html
        assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws/{served.token}"' in html
        assert "eagle3 · uitest (read-only)" in html
        assert served.url.startswith(served.base + "/?token=") and len(served.token) >= 24
        assert sum(served.token in ln for ln in served.printed) == 1  # printed once
        for url in (served.base + "/", served.base + "/?token=wrong"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(url, timeout=10)
            assert e.value.code == 403
    finally:
        served.close()
    assert not any(served.token in ln for ln in served.printed[1:] if "?token=" not in ln)


def test_the_served_console_answers_only_its_own_page_and_leaves_no_process(tmp_path: Path) -> None:
    """The stranger's page, the guessed URL, the third tab and the giant terminal are
    refused or bounded; a closed tab and a stopped server leave no console process."""
    import aiohttp

    cfg = write_config(tmp_path)
    served = Served(cfg)
    own = served.base

    async def refused(url: str, origin: str | None) -> int:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                async with http.ws_connect(url, origin=origin):
                    pass
            return e.value.status

    async def drive() -> None:
        assert await refused(served.ws, "http://evil.example") == 403
        assert await refused(served.ws, f"http://evil.example:{served.port}") == 403
        assert await refused(served.ws, None) == 403
        assert await refused(f"ws://127.0.0.1:{served.port}/ws", own) == 404
        assert await refused(f"ws://127.0.0.1:{served.port}/ws/{'x' * len(served.token)}", own) == 403
        async with aiohttp.ClientSession() as http:
            first = await http.ws_connect(served.ws + "?width=3000&height=3000", origin=own)
            second = await http.ws_connect(served.ws, origin=own)
            pids = wait_until(lambda: (p := _session_pids(served.proc.pid)) and len(p) == 2 and p,
                              60, "two console processes", served.proc)
            assert await refused(served.ws, own) == 503
            drawn = await second.receive(timeout=90)  # the console draws itself in the tab
            assert drawn.type == aiohttp.WSMsgType.BINARY and drawn.data, drawn
            env = _environ(pids[f"{served.proc.pid}:1"])
            assert (env["COLUMNS"], env["ROWS"]) == ("500", "200")
            await first.close()
            wait_until(lambda: f"{served.proc.pid}:1" not in _session_pids(served.proc.pid), 30,
                       "the closed tab's console to end", served.proc)
            deadline = time.monotonic() + 30
            while True:  # the slot is free again once the closed session is cleaned up
                try:
                    third = await http.ws_connect(served.ws, origin=own)
                    break
                except aiohttp.WSServerHandshakeError as e:
                    assert e.status == 503 and time.monotonic() < deadline, e
                    await asyncio.sleep(0.1)  # wait-ok: poll interval of a deadline loop
            wait_until(lambda: len(_session_pids(served.proc.pid)) == 2, 60, "the new tab's console", served.proc)
            served.close()
            assert served.proc.returncode is not None
            await second.close()
            await third.close()

    try:
        asyncio.run(drive())
        wait_until(lambda: not _session_pids(served.proc.pid), 15, "no console process after the server stopped")
    finally:
        served.close()
        for pid in _session_pids(served.proc.pid).values():
            os.kill(pid, signal.SIGKILL)


def test_a_server_killed_outright_takes_its_sessions_with_it(tmp_path: Path) -> None:
    import aiohttp

    served = Served(write_config(tmp_path))

    async def drive() -> None:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(served.ws, origin=served.base)
            wait_until(lambda: _session_pids(served.proc.pid), 60, "the console process", served.proc)
            os.kill(served.proc.pid, signal.SIGKILL)  # no shutdown hook runs
            served.proc.wait(10)
            wait_until(lambda: not _session_pids(served.proc.pid), 15, "no console under init")
            await ws.close()

    try:
        asyncio.run(drive())
    finally:
        served.close()
        for pid in _session_pids(served.proc.pid).values():
            os.kill(pid, signal.SIGKILL)


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
                await asyncio.sleep(0.1)  # wait-ok: poll interval of a deadline loop
            # Settled: the same picture twice in a row, the intro dialog long gone.
            last, shot = b"", await browser.screenshot()
            while shot != last:
                assert time.monotonic() < deadline, "the page never settled"
                await asyncio.sleep(0.5)  # wait-ok: two screenshots apart, under a deadline
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
