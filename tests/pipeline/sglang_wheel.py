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
files. The download holds a lock in the cache folder, so the suite's workers fetch it once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

SGLANG_VERSION = "0.5.23"
WHEEL_GLOB = f"sglang-{SGLANG_VERSION}-*.whl"
DOWNLOAD_TIMEOUT = 900
# When pip's own platform has no wheel of this release, ask for the one we know exists.
PLATFORM_FALLBACK = ["--platform", "manylinux_2_34_x86_64", "--python-version", "3.11",
                     "--implementation", "cp", "--abi", "cp311"]


def cache_root() -> Path:
    env = os.environ.get("EAGLE3_WHEEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "eagle3-console" / "wheels"


def _found(folder: Path) -> Path | None:
    hits = sorted(folder.glob(WHEEL_GLOB)) if folder.is_dir() else []
    return hits[0] if hits else None


def sglang_wheel() -> Path:
    """A local sglang 0.5.23 wheel, downloaded into the cache the first time."""
    env = os.environ.get("EAGLE3_SGLANG_WHEEL")
    if env:
        if not Path(env).is_file():
            pytest.fail(f"EAGLE3_SGLANG_WHEEL={env} is not a file")
        return Path(env)
    cache = cache_root()
    for folder in (cache, Path("/tmp/wheels")):
        hit = _found(folder)
        if hit:
            return hit
    cache.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(cache),
            "--disable-pip-version-check", f"sglang=={SGLANG_VERSION}"]
    errors = []
    with open(cache / ".download.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        hit = _found(cache)
        if hit:
            return hit
        for extra in ([], PLATFORM_FALLBACK):
            try:
                done = subprocess.run(base + extra, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT,
                                      check=False)
            except subprocess.TimeoutExpired:
                errors.append(f"pip download took over {DOWNLOAD_TIMEOUT} s")
                continue
            hit = _found(cache)
            if done.returncode == 0 and hit:
                return hit
            lines = (done.stderr or done.stdout).strip().splitlines()
            errors.append(lines[-1] if lines else f"pip exited {done.returncode}")
    pytest.fail(f"cannot get the sglang {SGLANG_VERSION} wheel (pip download --no-deps sglang=={SGLANG_VERSION} "
                f"into {cache}): {errors}; set EAGLE3_SGLANG_WHEEL to a downloaded wheel")


def unpacked_source() -> Path:
    """The folder holding the wheel's `sglang/srt/` tree, unpacked once (atomically) and cached."""
    wheel = sglang_wheel()
    dest = cache_root() / f"{wheel.stem}-src"
    if (dest / "sglang" / "srt").is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as z:
            members = [n for n in z.namelist()
                       if n.startswith("sglang/srt/") or n in ("sglang/__init__.py", "sglang/version.py")]
            z.extractall(tmp, members)
        try:
            os.rename(tmp, dest)
        except OSError:  # another run unpacked it meanwhile
            if not (dest / "sglang" / "srt").is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@pytest.fixture(scope="session")
def sglang_source() -> Path:
    return unpacked_source()
