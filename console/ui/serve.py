"""`eagle3 console CONFIG --serve [HOST:]PORT`: the same console in a browser, through
textual-serve. Each browser tab gets its own console process (the phases keep running
whoever watches).

It binds to 127.0.0.1 unless told otherwise: reach it through an SSH tunnel
(`ssh -L 8080:127.0.0.1:8080 gpu-box`). The served console is read-only (no run, stop,
check or verify: each of those journals a decision) unless `--serve-actions` is given.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

from console.core.errors import Eagle3Error

DEFAULT_HOST = "127.0.0.1"
READ_ONLY_FLAG = "--read-only"


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


def console_command(config: str, sets: Sequence[str], theme: str | None, actions: bool) -> str:
    """The command textual-serve runs for each browser session."""
    argv = [sys.executable, "-m", "console", "console", config, "--no-mouse"]
    for s in sets:
        argv += ["--set", s]
    if theme:
        argv += ["--theme", theme]
    if not actions:
        argv.append(READ_ONLY_FLAG)
    return shlex.join(argv)


def make_server(project: Any, address: str, sets: Sequence[str] = (), theme: str | None = None,
                actions: bool = False) -> Any:
    from textual_serve.server import Server

    host, port = parse_address(address)
    command = console_command(str(project.config.path), sets, theme, actions)
    mode = "actions allowed" if actions else "read-only"
    return Server(command, host=host, port=port, title=f"eagle3 · {project.config.name} ({mode})")


def serve(project: Any, address: str, sets: Sequence[str] = (), theme: str | None = None,
          actions: bool = False) -> int:
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        raise ServeError("--serve needs textual-serve: pip install textual-serve") from None
    server = make_server(project, address, sets, theme, actions)
    host, port = parse_address(address)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"eagle3: serving on {host}:{port}: anyone who can reach it sees the console"
              + ("" if not actions else " and can run and stop phases"), file=sys.stderr)
    server.serve()
    return 0
