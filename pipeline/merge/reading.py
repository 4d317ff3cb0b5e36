"""The parent's reading: the sources named on the command line, read through
`pipeline.chat.sources` into bounded chunks of usable records for the tokenizer workers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.chat.records import ChatRecord
from pipeline.chat.sources import SourcePolicy, SourceReport, iter_records, parse_role_map, source_files
from pipeline.merge.chunks import Chunk, content_chars
from pipeline.merge.options import Options
from pipeline.program_edge import BadInput

CHUNK_RECORDS = 256
CHUNK_CHARS = 16 * 2**20
"""A chunk closes at this many records or characters of content, whichever comes first."""


@dataclass(frozen=True)
class Source:
    name: str
    path: Path


def source_policy(opts: Options, max_record_bytes: int) -> SourcePolicy:
    if not 0.0 <= opts.max_invalid <= 1.0:
        raise BadInput(f"--max-invalid must be a share between 0 and 1 (0.05 is 5%), got {opts.max_invalid}")
    role_map = parse_role_map(opts.role_map)
    return SourcePolicy(
        strict=opts.strict,
        max_invalid=opts.max_invalid,
        role_map=role_map,
        on_assistant_first=opts.on_assistant_first,
        same_role=opts.same_role,
        max_record_bytes=max_record_bytes,
    )


def resolve_sources(args: list[str], include: list[str], exclude: list[str]) -> list[Source]:
    found: list[Source] = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            files = source_files(path)
            if not files:
                raise BadInput(f"source folder {arg} holds no *.jsonl or *.json files")
            found += [Source(f.stem, f) for f in files]
        elif path.is_file():
            found.append(Source(path.stem, path))
        else:
            raise BadInput(f"source {arg} does not exist; pass a .jsonl or .json file or a folder of them")
    seen: dict[str, Path] = {}
    for src in found:
        if src.name in seen:
            raise BadInput(f"two sources are named '{src.name}': {seen[src.name]} and {src.path}; rename one")
        seen[src.name] = src.path
    names = ", ".join(seen) or "none"
    for flag, wanted in (("--include", include), ("--exclude", exclude)):
        unknown = [w for w in wanted if w not in seen]
        if unknown:
            raise BadInput(f"{flag} names unknown source '{unknown[0]}'; the sources are: {names}")
    if include:
        found = [s for s in found if s.name in include]
    found = [s for s in found if s.name not in exclude]
    if not found:
        raise BadInput(f"no sources left after --include/--exclude (sources: {names})")
    return found


def read_chunks(sources: list[Source], policy: SourcePolicy, reports: dict[str, SourceReport]) -> Iterator[Chunk]:
    """Every usable record, in source order, in chunks of at most CHUNK_RECORDS records or
    CHUNK_CHARS characters; a chunk never spans two sources."""
    index = 0
    for src in sources:
        batch: list[ChatRecord] = []
        chars = 0
        for rec in iter_records(src.path, src.name, policy, reports[src.name]):
            batch.append(rec)
            chars += content_chars(rec.conversations)
            if len(batch) >= CHUNK_RECORDS or chars >= CHUNK_CHARS:
                yield Chunk(index, src.name, str(src.path), tuple(batch))
                index += 1
                batch, chars = [], 0
        if batch:
            yield Chunk(index, src.name, str(src.path), tuple(batch))
            index += 1
