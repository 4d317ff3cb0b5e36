"""Opening a file a program was handed (a config, an overlay, a journal, a JSON a stage reads,
a source dataset) so that a path which is not a file cannot hang or exhaust the reader.

`/dev/zero` never ends and a FIFO blocks `open()` until a writer comes: either would stop a
command, or every command, for ever. So every such path is opened with O_NONBLOCK (a FIFO
opens at once), checked with fstat on the opened descriptor (no window between check and
open), and refused unless it is a regular file; a read takes at most the bound + 1 byte, so
an oversized file is refused without being read whole.

The refusals are OSError (callers that say "cannot read X: ..." keep doing so) and the
stages' BadInput (exit 2 where nothing catches them). The console uses this module too:
one reader for every file the programs take."""

from __future__ import annotations

import errno
import io
import os
import stat

from pipeline.program_edge import BadInput

_BLOCK = 1 << 20


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


class RefusedFile(OSError, BadInput):
    """A path that cannot be read as given; str() names it and says what to do."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EINVAL, why, os.fspath(path))
        self.why = why

    def __str__(self) -> str:
        return f"{self.filename}: {self.why}"


class NotRegularFile(RefusedFile):
    pass


class FileTooLarge(RefusedFile):
    def __init__(self, path: str | os.PathLike[str], limit: int, size: int | None = None) -> None:
        self.size = size  # None: a file that grew past the bound while it was read
        held = f"is {size} bytes" if size is not None else f"is larger than {limit:,} bytes"
        super().__init__(path, f"{held}, more than the {limit:,} this file may hold; is this the right file?")


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of `path`, which must be a regular file (symlinks followed).
    FileNotFoundError and PermissionError pass through; a folder is IsADirectoryError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", os.fspath(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, f"is a {_kind(mode)}, not a regular file; pass the path of a file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(path: str | os.PathLike[str]) -> io.BufferedReader:
    """`open(path, "rb")` for a regular file only (a stream with no size bound: a dataset)."""
    return os.fdopen(open_regular(path), "rb")


def read_fd(fd: int, limit: int, path: str | os.PathLike[str]) -> bytes:
    """At most `limit` bytes from the descriptor's offset; FileTooLarge if there are more."""
    chunks: list[bytes] = []
    n = 0
    while n <= limit:
        block = os.read(fd, min(_BLOCK, limit + 1 - n))
        if not block:
            break
        chunks.append(block)
        n += len(block)
    if n > limit:
        raise FileTooLarge(path, limit)
    return b"".join(chunks)


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of a regular file of at most `limit` bytes."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileTooLarge(path, limit, size)
        return read_fd(fd, limit, path)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """read_bounded as UTF-8 text (UnicodeDecodeError for other bytes, as Path.read_text)."""
    return read_bounded(path, limit).decode("utf-8")
