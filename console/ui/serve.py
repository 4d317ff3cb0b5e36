"""`eagle3 console CONFIG --serve [HOST:]PORT`: the same console in a browser, through
textual-serve. Each browser tab gets its own console process (the phases keep running
whoever watches).

It binds to 127.0.0.1 unless told otherwise: reach it through an SSH tunnel
(`ssh -L 8080:127.0.0.1:8080 gpu-box`). The served console is read-only (no run, stop,
check or verify: each of those journals a decision) unless `--serve-actions` is given.

A loopback port is not private: every web page the operator opens can make the browser
connect to it, and a browser's websocket is not held by the same-origin rule. So the server
textual-serve would be is wrapped (a subclass, no fork) to:
- require a random token, made at each start and printed once on the terminal (never
  logged: aiohttp's access log is off), in the page's URL and the websocket's path;
- accept a websocket only from a page of its own origin (Origin equal to the Host the
  browser asked for, that host being the bound address, a loopback name or this machine);
- cap the sessions (2 by default) and bound each terminal's width and height;
- end a session's console process group when its socket closes or the server stops
  (the process also gets SIGTERM if the server dies without stopping, by PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import shlex
import signal
import sys
from collections.abc import Sequence
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import WSCloseCode, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from console.core.lifecycle.project import Project
from console.core.runs.procs import signal_group
from console.ui.serve_rules import (
    DEFAULT_SESSIONS,
    HEIGHT,
    KILL_GRACE,
    LOOPBACK_NAMES,
    QUIT_GRACE,
    SESSION_ENV,
    WIDTH,
    bounded,
    console_command,
    die_with_parent,
    known_hosts,
    parse_address,
    same_origin,
)


class Session(AppService):
    """One browser tab's console: its own session and process group, never a shell,
    its size bounded, its whole group ended with it."""

    mark = ""

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
        env = self._build_environment(width=width, height=height)
        env[SESSION_ENV] = self.mark
        self._process = process = await asyncio.create_subprocess_exec(
            *shlex.split(self.command), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True, preexec_fn=die_with_parent)
        self._stdin = process.stdin
        return process

    async def set_terminal_size(self, width: int, height: int) -> None:
        await super().set_terminal_size(bounded(width, WIDTH, 80), bounded(height, HEIGHT, 24))

    def kill(self, sig: int) -> None:
        proc = self._process
        if proc is not None and proc.returncode is None:
            signal_group(proc.pid, sig)

    async def stop(self) -> None:
        proc = self._process
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(self.send_meta({"type": "quit"}), 1.0)
            except (TimeoutError, Exception):  # noqa: BLE001 - a broken pipe: kill below
                pass
            for sig, grace in ((None, QUIT_GRACE), (signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, KILL_GRACE)):
                if sig is not None:
                    self.kill(sig)
                try:
                    await asyncio.wait_for(proc.wait(), grace)
                    break
                except TimeoutError:
                    continue
        self.kill(signal.SIGKILL)  # what is left of its group
        if self._task is not None:
            task, self._task = self._task, None
            try:
                await asyncio.wait_for(task, KILL_GRACE)
            except (TimeoutError, asyncio.CancelledError):
                pass


class GuardedServer(Server):
    def __init__(self, command: str, host: str, port: int, name: str, mode: str, sessions: int) -> None:
        super().__init__(command, host=host, port=port, title=f"eagle3 · {name} ({mode})")
        self.name, self.mode = name, mode
        self.token = secrets.token_urlsafe(24)
        self.max_sessions = sessions
        self.allowed_hosts = known_hosts(host)
        self.sessions: set[Any] = set()
        self.sockets: set[Any] = set()
        self.started = 0

    def page_url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/?token={self.token}"

    def _token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())

    async def _make_app(self) -> Any:
        app = web.Application()
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws/{token}", self.handle_websocket, name="websocket"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    async def on_startup(self, app: Any) -> None:
        pass

    def announce(self, *_: Any) -> None:
        """Called by aiohttp once the port listens (its own banner, replaced)."""
        print(f"eagle3: serving {self.name} ({self.mode}, at most {self.max_sessions} "
              f"session{'s' if self.max_sessions > 1 else ''}); open\n  {self.page_url()}\n"
              "(the token is this start's only; Ctrl-C stops the server)", flush=True)

    async def on_shutdown(self, app: Any) -> None:
        for ws in list(self.sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server stopped")
        await asyncio.gather(*(s.stop() for s in list(self.sessions)), return_exceptions=True)

    async def handle_index(self, request: Any) -> Any:
        if not self._token_ok(request.query.get("token")):
            raise web.HTTPForbidden(text="eagle3: open the URL with the token that `eagle3 console --serve` "
                                         "printed when it started\n")
        scheme = "wss" if request.secure else "ws"
        context = {
            "font_size": bounded(request.query.get("fontsize"), (6, 64), 16),
            "app_websocket_url": f"{scheme}://{request.host}/ws/{self.token}",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        response = aiohttp_jinja2.render_template("app_index.html", request, context)
        response.headers.update({"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                                 "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": "frame-ancestors 'none'"})
        return response

    async def handle_websocket(self, request: Any) -> Any:
        if not self._token_ok(request.match_info.get("token")):
            raise web.HTTPForbidden(text="eagle3: wrong or missing token\n")
        if not same_origin(request.headers.get("Origin"), request.host, self.allowed_hosts):
            raise web.HTTPForbidden(text="eagle3: this console answers only its own page (Origin refused)\n")
        if len(self.sessions) >= self.max_sessions:
            raise web.HTTPServiceUnavailable(
                text=f"eagle3: {self.max_sessions} sessions are open already (--serve-sessions); "
                     "close a tab and reload\n")
        width = bounded(request.query.get("width"), WIDTH, 80)
        height = bounded(request.query.get("height"), HEIGHT, 24)
        websocket = web.WebSocketResponse(heartbeat=15)
        session = Session(self.command, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                          close=websocket.close,  # type: ignore[arg-type]  # its bool result is not read
                          download_manager=self.download_manager, debug=self.debug)
        self.started += 1
        session.mark = f"{os.getpid()}:{self.started}"
        self.sessions.add(session)  # before any await: the cap holds against a burst
        try:
            await websocket.prepare(request)
            self.sockets.add(websocket)
            await session.start(width, height)
            await self._process_messages(websocket, session)
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a bad message ends the session, not the server
            pass
        finally:
            self.sockets.discard(websocket)
            try:
                await asyncio.shield(session.stop())
            finally:
                self.sessions.discard(session)
                if not websocket.closed:
                    await websocket.close()
        return websocket

    def serve(self, debug: bool = False) -> None:
        self.debug = debug
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.request_exit)
        # access_log=None: every request line would carry the token.
        web.run_app(self._make_app(), host=self.host, port=self.port, handle_signals=False, loop=loop,
                    access_log=None, shutdown_timeout=10, print=self.announce)


def make_server(project: Project, address: str, sets: Sequence[str] = (), theme: str | None = None,
                actions: bool = False, sessions: int = DEFAULT_SESSIONS) -> GuardedServer:
    """The guarded server for `project`, not yet listening."""
    host, port = parse_address(address)
    command = console_command(str(project.config.path), sets, theme, actions)
    return GuardedServer(command, host, port, project.config.name, "actions allowed" if actions else "read-only",
                         sessions)


def serve(project: Project, address: str, sets: Sequence[str] = (), theme: str | None = None,
          actions: bool = False, sessions: int = DEFAULT_SESSIONS) -> int:
    """Serve until stopped; the command line has checked `address` and `sessions` (serve_rules)."""
    server = make_server(project, address, sets, theme, actions, sessions)
    if server.host not in LOOPBACK_NAMES:
        print(f"eagle3: serving on {server.host}:{server.port}: anyone who can reach it and has the URL sees the console"
              + ("" if not actions else " and can run and stop phases"), file=sys.stderr)
    server.serve()
    return 0
