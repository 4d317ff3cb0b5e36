"""The edge of a stage program: whatever escapes its body becomes one line on stderr and an
exit code, never a traceback. A stage's own errors carry their exit code (`exit_code`);
Ctrl-C is 130; anything else is 1 with the exception's type named."""

from __future__ import annotations

import sys
from collections.abc import Callable


def run_program(name: str, body: Callable[[], int], known: type[Exception] | tuple[type[Exception], ...]) -> int:
    try:
        return body()
    except known as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return int(getattr(e, "exit_code", 1))
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the program's edge: one line, no traceback
        print(f"{name}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
