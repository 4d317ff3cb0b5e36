"""The content checksum of the hidden-state store: xxh3_64 (PyPI `xxhash`), 16 hex digits.

Why xxh3: it hashes at ~17 GB/s on one core (crc32 from zlib: ~4 GB/s), so checksumming
every sample as it is written costs extraction almost nothing, and a whole-store
`--verify` is bound by the disk, not the CPU. It is not a cryptographic hash: it catches
rot and truncation, not tampering. Torch-free, so the trainer, the SGLang client and the
console's check (through `python -m pipeline.extract --verify`) compute the same value.

    h = Checksum(); h.update(buf); ...; h.hexdigest()   # over the buffers as they are written
    file_checksum(path)                                 # the same value, read back from disk
"""

from __future__ import annotations

import os
from pathlib import Path

import xxhash

ALGO = "xxh3"
"""The manifest key that holds the checksum (its value: 16 lowercase hex digits)."""

_CHUNK = 8 * 2**20


class Checksum:
    """Incremental xxh3_64 over buffers (bytes, memoryview, anything with the buffer protocol)."""

    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h = xxhash.xxh3_64()

    def update(self, buf: bytes | memoryview) -> None:
        self._h.update(buf)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def file_checksum(path: Path | str) -> str:
    """xxh3_64 of a file's whole content, read in 8 MiB chunks (bounded memory)."""
    h = Checksum()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while True:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            h.update(view[:n])
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return h.hexdigest()
