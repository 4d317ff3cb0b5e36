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
import ctypes
import hmac
import ipaddress
import os
import secrets
import shlex
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from console.core.leaves.errors import Eagle3Error

DEFAULT_HOST = "127.0.0.1"
READ_ONLY_FLAG = "--read-only"
DEFAULT_SESSIONS = 2
MAX_SESSIONS = 16
WIDTH = (20, 500)  # columns: a 4K screen at a small font; 3000x3000 cost 206 MB
HEIGHT = (8, 200)
SESSION_ENV = "EAGLE3_SERVE_SESSION"  # "<server pid>:<n>", inherited by a session's processes
QUIT_GRACE = 5.0  # seconds a session's console has to quit when asked, before its group is killed
KILL_GRACE = 2.0
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class ServeError(Eagle3Error):
    pass


def parse_address(text: str) -> tuple[str, int]:
    """`8080` -> (127.0.0.1, 8080); `0.0.0.0:8080`, `[::1]:8080` as written."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = DEFAULT_HOST, text
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
    except ValueError:
        raise ServeError(f"--serve {text}: expected [HOST:]PORT, e.g. 8080 or 127.0.0.1:8080") from None
    if not 1 <= number <= 65535:
        raise ServeError(f"--serve {text}: the port must be 1..65535")
    return host, number


def check_sessions(n: int) -> int:
    if not 1 <= n <= MAX_SESSIONS:
        raise ServeError(f"--serve-sessions {n}: must be 1..{MAX_SESSIONS}")
    return n


def console_command(config: str, sets: Sequence[str], theme: str | None, actions: bool) -> str:
    """The command each browser session runs (split like a shell would, never run by one)."""
    argv = [sys.executable, "-m", "console", "console", config, "--no-mouse"]
    for s in sets:
        argv += ["--set", s]
    if theme:
        argv += ["--theme", theme]
    if not actions:
        argv.append(READ_ONLY_FLAG)
    return shlex.join(argv)


def bounded(value: Any, limits: tuple[int, int], default: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = default
    return max(limits[0], min(limits[1], n))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def known_hosts(bind: str) -> set[str]:
    """Host names a page of this server may be reached by. Any other name in `Host` is a
    DNS-rebinding page (evil.example resolving to 127.0.0.1) and is refused."""
    names = {bind.lower(), *LOOPBACK_NAMES}
    if bind in ("0.0.0.0", "::", ""):
        for name in (socket.gethostname(), socket.getfqdn()):
            names.add(name.lower())
    return names


def same_origin(origin: str | None, host_header: str | None, allowed: set[str]) -> bool:
    """The websocket comes from a page this server served: its Origin is
    scheme://<the Host it connected to>, and that host is one of ours (or an IP literal,
    which a rebinding attack cannot use: its Host would carry the attacker's name)."""
    if not origin or not host_header:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host_header.lower():
        return False
    name = (urlsplit(f"//{host_header}").hostname or "").lower()
    return name in allowed or _is_ip(name)


def _die_with_parent() -> None:
    """In the session's child, before exec: SIGTERM when the server dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the server died before the prctl
        os._exit(1)


def make_server(project: Any, address: str, sets: Sequence[str] = (), theme: str | None = None,
                actions: bool = False, sessions: int = DEFAULT_SESSIONS, token: str | None = None) -> Any:
    """The guarded server (textual-serve's Server, subclassed)."""
    # Optional packages, loaded on first use: only `--serve` needs textual-serve and its aiohttp.
    import aiohttp_jinja2
    from aiohttp import WSCloseCode, web
    from textual_serve.app_service import AppService
    from textual_serve.server import Server

    host, port = parse_address(address)
    command = console_command(str(project.config.path), sets, theme, actions)
    mode = "actions allowed" if actions else "read-only"

    class Session(AppService):
        """One browser tab's console: its own session and process group, never a shell,
        its size bounded, its whole group ended with it."""

        mark = ""

        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            env = self._build_environment(width=width, height=height)
            env[SESSION_ENV] = self.mark
            self._process = process = await asyncio.create_subprocess_exec(
                *shlex.split(self.command), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True, preexec_fn=_die_with_parent)
            self._stdin = process.stdin
            return process

        async def set_terminal_size(self, width: int, height: int) -> None:
            await super().set_terminal_size(bounded(width, WIDTH, 80), bounded(height, HEIGHT, 24))

        def kill(self, sig: int) -> None:
            proc = self._process
            if proc is not None and proc.returncode is None:
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

        async def stop(self) -> None:
            proc = self._process
            if proc is not None and proc.returncode is None:
                try:
                    await asyncio.wait_for(self.send_meta({"type": "quit"}), 1.0)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a broken pipe: kill below
                    pass
                for sig, grace in ((None, QUIT_GRACE), (signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, KILL_GRACE)):
                    if sig is not None:
                        self.kill(sig)
                    try:
                        await asyncio.wait_for(proc.wait(), grace)
                        break
                    except asyncio.TimeoutError:
                        continue
            self.kill(signal.SIGKILL)  # what is left of its group
            if self._task is not None:
                task, self._task = self._task, None
                try:
                    await asyncio.wait_for(task, KILL_GRACE)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    pass

    class GuardedServer(Server):
        def __init__(self) -> None:
            super().__init__(command, host=host, port=port, title=f"eagle3 · {project.config.name} ({mode})")
            self.token = token or secrets.token_urlsafe(24)
            self.max_sessions = sessions
            self.allowed_hosts = known_hosts(host)
            self.sessions: set[Any] = set()
            self.sockets: set[Any] = set()
            self.started = 0

        def page_url(self) -> str:
            shown = f"[{host}]" if ":" in host else host
            return f"http://{shown}:{port}/?token={self.token}"

        def _token_ok(self, given: str | None) -> bool:
            return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())

        async def _make_app(self) -> Any:
            app = web.Application()
            import jinja2  # optional, as above: textual-serve brings it

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
            print(f"eagle3: serving {project.config.name} ({mode}, at most {self.max_sessions} "
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
                              close=websocket.close, download_manager=self.download_manager, debug=self.debug)
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

    return GuardedServer()


def serve(project: Any, address: str, sets: Sequence[str] = (), theme: str | None = None,
          actions: bool = False, sessions: int = DEFAULT_SESSIONS) -> int:
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        raise ServeError("--serve needs textual-serve: pip install textual-serve") from None
    server = make_server(project, address, sets, theme, actions, check_sessions(sessions))
    host, port = parse_address(address)
    if host not in LOOPBACK_NAMES:
        print(f"eagle3: serving on {host}:{port}: anyone who can reach it and has the URL sees the console"
              + ("" if not actions else " and can run and stop phases"), file=sys.stderr)
    server.serve()
    return 0
