"""A small Chrome DevTools Protocol client for the browser test: start headless Chromium,
open a page, evaluate JavaScript, take screenshots. Only what the test needs, over aiohttp
(which textual-serve already brings)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

import aiohttp


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, width: int = 1280, height: int = 760) -> None:
        self.width, self.height = width, height
        self.proc: subprocess.Popen[str] | None = None
        self.profile = tempfile.mkdtemp(prefix="eagle3-chromium-")
        self.session: aiohttp.ClientSession | None = None
        self.ws: Any = None
        self._id = 0

    async def __aenter__(self) -> Browser:
        exe = chromium()
        assert exe is not None
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             f"--user-data-dir={self.profile}", f"--window-size={self.width},{self.height}",
             "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = await asyncio.to_thread(self.proc.stderr.readline)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                url = m.group(1)
            elif not line and self.proc.poll() is not None:
                break
        assert url is not None, "chromium did not start its DevTools endpoint"
        self.session = aiohttp.ClientSession()
        http = url.replace("ws://", "http://").split("/devtools/")[0]
        async with self.session.get(f"{http}/json/list") as resp:
            pages = [p for p in await resp.json(content_type=None) if p.get("type") == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        mid = self._id
        await self.ws.send_str(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads((await self.ws.receive()).data)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def open(self, url: str) -> None:
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        res = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res.get("result", {}).get("value")

    async def screenshot(self) -> bytes:
        res = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(res["data"])
