"""What the browser view (console/ui/serve.py) decides without textual-serve loaded: the
address, the session bounds, the command a session runs, the Origin and Host a page must
carry, and the session's tie to the server's life. The command line checks its --serve
flags with these before the optional package is imported."""

from __future__ import annotations

import ctypes
import importlib.util
import ipaddress
import os
import shlex
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from console.core.text.errors import Eagle3Error

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


def die_with_parent() -> None:
    """In the session's child, before exec: SIGTERM when the server dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the server died before the prctl
        os._exit(1)


def require_textual_serve() -> None:
    """--serve is an optional extra: say how to get it before anything imports it."""
    if importlib.util.find_spec("textual_serve") is None:
        raise ServeError("--serve needs textual-serve: pip install textual-serve")
