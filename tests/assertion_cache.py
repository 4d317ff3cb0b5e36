"""Writes pytest's assertion-rewritten bytecode of the suite's test modules and conftests, where
a pytest run that may write bytecode keeps it (`__pycache__/<name>.<tag>-pytest-<version>.pyc`).

Where PYTHONDONTWRITEBYTECODE is set (as on the machines we build on), pytest rewrites every test
module in each xdist worker and keeps none: 8 of the 17 CPU-seconds of a worker's collection
(2 cores, 2026-12-07). `make bytecode` runs this once; each worker then reads what it wrote, as
pytest reads its own (the source's mtime and size in the header, so an edited module is
rewritten by pytest again). A module whose cached code is current is left alone.

pytest's cache layout is its own: should a pytest release move it, this says so in one line and
writes nothing, and the suite rewrites as before."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def rewritten(path: Path) -> bool:
    """Writes `path`'s rewritten code unless its cache is current; True when it wrote."""
    import ast

    from _pytest.assertion import rewrite

    pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
    if rewrite._read_pyc(path, pyc) is not None:
        return False
    stat, source = os.stat(path), path.read_bytes()
    tree = ast.parse(source, filename=str(path))
    rewrite.rewrite_asserts(tree, source, str(path))  # no config: as ours, no assertion-pass hook
    code = compile(tree, str(path), "exec", dont_inherit=True)
    pyc.parent.mkdir(exist_ok=True)
    part = pyc.with_name(f"{pyc.name}.{os.getpid()}")
    with open(part, "wb") as f:
        rewrite._write_pyc_fp(f, stat, code)
    os.replace(part, pyc)
    return True


def main() -> int:
    modules = sorted(p for p in TESTS.rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py")
    try:
        written = sum(rewritten(p) for p in modules)
    except (ImportError, AttributeError, TypeError) as e:
        print(f"assertion_cache: pytest's rewrite cache has moved ({type(e).__name__}: {e}); nothing written")
        return 0
    if written:
        print(f"assertion_cache: {written} of {len(modules)} test modules rewritten for pytest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
