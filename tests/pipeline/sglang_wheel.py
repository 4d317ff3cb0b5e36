"""The real SGLang 0.5.23 source, for tests that read or patch its files (SGLang itself cannot be
installed on the test machines: it needs a GPU and pins its own torch).

Use the fixture in a test module of this folder:

    from sglang_wheel import sglang_source  # noqa: F401  (the fixture)

    def test_x(sglang_source):
        path = sglang_source / "sglang" / "srt" / "models" / "llama.py"

`sglang_source` is the folder holding `sglang/` (its `srt/` tree, `__init__.py` and
`version.py`), unpacked once and kept between runs; treat it as read-only (copy a file before
patching it).

Where the wheel comes from, first found wins: $EAGLE3_SGLANG_WHEEL (a .whl path), the cache
folder ($EAGLE3_WHEEL_CACHE, default ~/.cache/eagle3-console/wheels), /tmp/wheels, else
`pip download --no-deps sglang==0.5.23` into the cache folder (CI has PyPI access). Without
any of these the tests fail, saying so: they are the only check that the patch fits the real
files. Fetching, caching and unpacking are pypi_cache.py's (one lock, one atomic rename).
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path from tests/core too
    sys.path.insert(0, HERE)
from pypi_cache import built_once, cache_root, cached_wheel  # noqa: E402

SGLANG_VERSION = "0.5.23"
# When pip's own platform has no wheel of this release, ask for the one we know exists.
PLATFORM_FALLBACK = ("--platform", "manylinux_2_34_x86_64", "--python-version", "3.11",
                     "--implementation", "cp", "--abi", "cp311")


def sglang_wheel() -> Path:
    """A local sglang 0.5.23 wheel, downloaded into the cache the first time."""
    env = os.environ.get("EAGLE3_SGLANG_WHEEL")
    if env:
        if not Path(env).is_file():
            pytest.fail(f"EAGLE3_SGLANG_WHEEL={env} is not a file")
        return Path(env)
    return cached_wheel("sglang", SGLANG_VERSION, fallbacks=(PLATFORM_FALLBACK,),
                        hint="set EAGLE3_SGLANG_WHEEL to a downloaded wheel")


def unpacked_source() -> Path:
    """The folder holding the wheel's `sglang/srt/` tree, unpacked once (atomically) and cached."""
    wheel = sglang_wheel()

    def unpack(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp, [n for n in z.namelist()
                               if n.startswith("sglang/srt/") or n in ("sglang/__init__.py", "sglang/version.py")])

    return built_once(cache_root() / f"{wheel.stem}-src", unpack)


@pytest.fixture(scope="session")
def sglang_source() -> Path:
    return unpacked_source()
