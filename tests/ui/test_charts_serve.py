"""The charts in the browser view: `eagle3 console CFG --serve` streams the same console to a
tab, and what it streams for a finished train and evaluate run holds the loss curve and the
acceptance bars at 80x24, as the terminal shows them (tests/ui/test_charts_tmux.py).

Read through textual-serve's own websocket, as the page's terminal reads it: the binary frames
are the terminal's bytes, a text frame `["stdin", keys]` is what the tab types."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from charts_project import write_charts_project
from test_charts_tmux import _run_to_end
from test_ui_serve import Served

from console.core.lifecycle.project import Project

ANSI = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>NOPMc78])")
BARS = "▁▂▃▄▅▆▇█"


def _curve(text: str) -> str:
    """The longest run of sparkline bars after the loss label, '' before it is drawn."""
    after = text.rsplit("loss 1.208", 1)[1] if "loss 1.208" in text else ""
    runs = re.findall(f"[{BARS}]+", after)
    return max(runs, key=len, default="")


def test_the_browser_tab_gets_the_loss_curve_and_the_acceptance_bars(tmp_path: Path) -> None:
    import aiohttp

    cfg = write_charts_project(tmp_path)
    project = Project.load(cfg)
    for phase_id in ("train", "evaluate"):
        _run_to_end(project, phase_id)
    served = Served(cfg)

    async def drive() -> tuple[str, str]:
        streamed = ""

        async def read_until(done, what: str) -> str:  # type: ignore[no-untyped-def]
            nonlocal streamed
            deadline = time.monotonic() + 90
            while not done(ANSI.sub("", streamed)):
                left = deadline - time.monotonic()
                assert left > 0, f"the tab never got {what}; last bytes: {ANSI.sub('', streamed)[-400:]!r}"
                try:
                    msg = await ws.receive(timeout=left)
                except TimeoutError:
                    continue
                assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), msg
                if msg.type == aiohttp.WSMsgType.BINARY:
                    streamed += msg.data.decode("utf-8", errors="replace")
            return ANSI.sub("", streamed)

        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(served.ws + "?width=80&height=24", origin=served.base)
            await read_until(lambda t: "Train the" in t, "the console")
            streamed = ""
            await ws.send_json(["stdin", "\x1b[H"])  # Home: the train phase
            train = await read_until(lambda t: len(_curve(t)) >= 20 and "val acc_0" in t, "the loss curve")
            streamed = ""
            await ws.send_json(["stdin", "j"])
            evaluate = await read_until(lambda t: "at 5,4,8" in t and "per position, 5,4,8" in t and "pos 1" in t,
                                        "the bars")
            await ws.close()
            return train, evaluate

    try:
        train, evaluate = asyncio.run(drive())
    finally:
        served.close()
    curve = _curve(train)
    assert set(curve) <= set(BARS) and curve[0] > curve[-1]  # the loss fell: high at the start, low at the end
    assert "█" in evaluate.split("per position, 5,4,8", 1)[1]  # the best setting's bar is drawn on that row
