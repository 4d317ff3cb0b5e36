"""The one reader of raw chat sources (merge and regenerate read through it).

Real datasets are dirty: ShareGPT V3 holds empty conversations, roles named `bing` or
`chatgpt`, empty answers, continuation chunks that open with the assistant, duplicate ids,
and it ships as one JSON array cut mid-record. One bad record in 100,000 must not cost the
run, so an unusable record is skipped and counted by reason, with a few examples (file:line
and id); a source that is mostly unusable is probably the wrong file, so past `max_invalid`
the read stops (exit 2) naming the share and the top reasons. `strict` restores
stop-on-the-first.

Policies (assistant-first records, duplicate ids, consecutive same-role turns) are counted
too, but they are choices, not defects: they never count toward `max_invalid`.

A file whose first character is `[` is read as a JSON array, element by element
(`pipeline.chat.json_stream`); anything else as JSON lines. A record without an id gets
`<source>:<line>` in JSON lines and `<source>:<n>` (its position) in an array.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from pipeline.bounded_read import open_file
from pipeline.chat.json_stream import ArrayReader, first_char, read_lines
from pipeline.chat.records import (
    EMPTY_VALUE,
    NO_ASSISTANT,
    REASONS,
    ChatRecord,
    RecordError,
    decode_line,
    default_id,
    record_from_obj,
)
from pipeline.chat.template import ROLES
from pipeline.program_edge import BadInput
from pipeline.records.source_reading import ArrayCut, DuplicateIds, PolicyCount, SourceReading

DEFAULT_ROLE_MAP: Mapping[str, str] = MappingProxyType({"bing": "assistant", "chatgpt": "assistant", "bard": "assistant"})
"""ShareGPT's extra speaker names; all three are assistants (the web UIs the logs came from)."""
DEFAULT_MAX_RECORD_BYTES = 64 * 2**20
EXAMPLES_KEPT = 3
ASSISTANT_FIRST = "assistant_first"
DUPLICATE_ID = "duplicate_id"
REPEATS_SKIPPED = "repeats_skipped_id"
SAME_ROLE = "same_role"
LINE_TOO_LONG = "line_too_long"
POLICIES = (ASSISTANT_FIRST, DUPLICATE_ID, SAME_ROLE)
SOURCE_SUFFIXES = (".jsonl", ".json")
JOINER = "\n\n"


class SourceError(BadInput):
    """A source that cannot be used as a whole (too many bad records, an array cut short under
    --strict); str() names the file and what to do. An array that cannot be read past a point
    is json_stream's StreamError, also BadInput."""


@dataclass(frozen=True)
class SourcePolicy:
    strict: bool = False
    max_invalid: float = 0.05
    role_map: Mapping[str, str] = field(default_factory=lambda: DEFAULT_ROLE_MAP, hash=False)
    on_assistant_first: str = "keep"
    same_role: str = "join"
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    """A JSON line longer than this is skipped unread; an array element longer stops the read."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_invalid <= 1.0:
            raise ValueError(f"max_invalid must be a share between 0 and 1, got {self.max_invalid}")
        if self.on_assistant_first not in ("keep", "drop"):
            raise ValueError(f"on_assistant_first must be keep or drop, got {self.on_assistant_first!r}")
        if self.same_role not in ("join", "drop"):
            raise ValueError(f"same_role must be join or drop, got {self.same_role!r}")
        for raw, role in self.role_map.items():
            if role not in ROLES:
                raise ValueError(f"role map {raw}={role}: the role must be one of {', '.join(ROLES)}")
        if self.max_record_bytes < 2:
            raise ValueError(f"max_record_bytes must be at least 2, got {self.max_record_bytes}")


def parse_role_map(text: str) -> dict[str, str]:
    """`bing=assistant,chatgpt=assistant` as the command line spells it; '' maps nothing.
    BadInput naming the entry that does not parse."""
    table: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        raw, sep, role = (s.strip() for s in item.partition("="))
        if not sep or not raw or role not in ROLES:
            raise BadInput(
                f"--role-map entry {item!r}: expected NAME=ROLE with ROLE one of {', '.join(ROLES)} "
                "(e.g. bing=assistant,chatgpt=assistant)"
            )
        table[raw] = role
    return table


def format_role_map(table: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in table.items())


@dataclass
class SourceReport:
    """What reading one source found: records by reason skipped, policies applied, a few examples."""

    source: str = ""
    records: int = 0
    """Records met: usable, skipped, left out by a policy, and lines too long to read."""
    usable: int = 0
    skipped: Counter = field(default_factory=Counter)
    policies: Counter = field(default_factory=Counter)
    lines_too_long: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    first_problem: dict[str, str] = field(default_factory=dict)
    """The whole message of the first record skipped for each reason."""
    files: list[str] = field(default_factory=list)
    cuts: list[ArrayCut] = field(default_factory=list)
    policy: SourcePolicy = field(default_factory=SourcePolicy)
    bytes_read: int = 0
    """How far into the source the reader is (all files so far): for a progress estimate."""

    def note(self, kind: str, path: str, line: int, rid: str | None) -> None:
        shown = self.examples.setdefault(kind, [])
        if len(shown) < EXAMPLES_KEPT:
            shown.append(f"{path}:{line}" + (f" (id {rid})" if rid else ""))

    def invalid(self) -> int:
        return sum(self.skipped.values())

    def invalid_share(self) -> float:
        return self.invalid() / self.records if self.records else 0.0

    def top_reasons(self, n: int = 3) -> str:
        return "; ".join(
            f"{count} {reason} (first: {self.first_problem.get(reason, '?')})" for reason, count in self.skipped.most_common(n)
        )

    def to_record(self) -> SourceReading:
        """What the stats of merge and regenerate keep of this reading."""
        p = self.policy
        return SourceReading(
            files=tuple(self.files),
            records=self.records,
            usable=self.usable,
            invalid=self.invalid(),
            invalid_share=round(self.invalid_share(), 6),
            skipped={r: self.skipped[r] for r in REASONS if self.skipped[r]},
            assistant_first=PolicyCount(records=self.policies[ASSISTANT_FIRST], action=p.on_assistant_first),
            duplicate_id=DuplicateIds(records=self.policies[DUPLICATE_ID], action="first usable kept",
                                      kept_after_a_skipped_one=self.policies[REPEATS_SKIPPED]),
            same_role=PolicyCount(records=self.policies[SAME_ROLE], action=p.same_role),
            lines_too_long=self.lines_too_long,
            cut=tuple(self.cuts),
            examples={k: tuple(v) for k, v in self.examples.items()},
            first_problem=dict(self.first_problem),
            role_map=dict(p.role_map),
        )

    def warnings(self) -> list[str]:
        out: list[str] = []
        for reason, count in self.skipped.most_common():
            out.append(
                f"{count} of {self.records} records skipped: {reason} (e.g. {self._shown(reason)}; "
                f"the first: {self.first_problem.get(reason, '?')})"
            )
        p = self.policy
        n = self.policies[ASSISTANT_FIRST]
        if n:
            how = "kept" if p.on_assistant_first == "keep" else "dropped (--on-assistant-first drop)"
            out.append(f"{n} records open with an assistant turn: {how} (e.g. {self._shown(ASSISTANT_FIRST)})")
        n = self.policies[DUPLICATE_ID]
        if n:
            out.append(f"{n} records repeat an earlier record's id: the first usable one kept (e.g. {self._shown(DUPLICATE_ID)})")
        n = self.policies[REPEATS_SKIPPED]
        if n:
            out.append(
                f"{n} records repeat the id of an earlier, skipped record: kept, as the first usable one "
                f"(e.g. {self._shown(REPEATS_SKIPPED)})"
            )
        n = self.policies[SAME_ROLE]
        if n:
            how = f"joined into one turn ({JOINER!r} between)" if p.same_role == "join" else "records dropped"
            out.append(f"{n} records have consecutive turns of one role: {how} (e.g. {self._shown(SAME_ROLE)})")
        if self.lines_too_long:
            out.append(
                f"{self.lines_too_long} lines longer than {p.max_record_bytes} bytes skipped unread "
                f"(e.g. {self._shown(LINE_TOO_LONG)})"
            )
        for cut in self.cuts:
            out.append(
                f"{cut.file}: the JSON array is cut at byte {cut.byte} (line {cut.line}): "
                f"the unfinished record there is left out; every complete record before it was read"
            )
        return out

    def _shown(self, kind: str) -> str:
        return ", ".join(self.examples.get(kind, [])) or "none kept"


def source_files(path: Path) -> list[Path]:
    """The files a source names: the file itself, or a folder's *.jsonl and *.json (sorted)."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SOURCE_SUFFIXES)
    return [path]


def _id_key(rid: str) -> bytes:
    return hashlib.blake2b(rid.encode("utf-8", errors="surrogatepass"), digest_size=16).digest()


def _raw_records(path: Path, source: str, policy: SourcePolicy, report: SourceReport) -> Iterator[tuple[object, int, str]]:
    """(decoded value or RecordError, line, fallback id) for every record of one file."""
    name = str(path)
    with open_file(path) as f:  # a FIFO or a device is refused, never read
        if first_char(f) == "[":
            reader = ArrayReader(f, name, policy.max_record_bytes)
            base = report.bytes_read
            for el in reader:
                report.bytes_read = base + reader.bytes_read
                yield el.value, el.line, f"{source}:{el.index}"
            if reader.cut_at is not None and reader.cut_line is not None:  # set together
                cut = ArrayCut(file=name, byte=reader.cut_at, line=reader.cut_line)
                if policy.strict:
                    raise SourceError(
                        f"{name}:{reader.cut_line}: the JSON array is cut at byte {reader.cut_at} "
                        "(the file ends inside a record); --strict stops here"
                    )
                report.cuts.append(cut)
            report.bytes_read = base + reader.bytes_read
            return
        for line, (raw, size) in enumerate(read_lines(f, None, policy.max_record_bytes), 1):
            report.bytes_read += size
            if raw is None:
                report.records += 1
                report.lines_too_long += 1
                report.note(LINE_TOO_LONG, name, line, None)
                continue
            if not raw.strip():
                continue
            try:
                value: object = decode_line(raw, name, line)
            except RecordError as exc:
                value = exc
            yield value, line, default_id(source, line)


def _check(rec: ChatRecord, path: str) -> None:
    for i, msg in enumerate(rec.conversations):
        if not msg["content"].strip():
            raise RecordError(path, rec.line, f"conversations[{i}]", "is empty", EMPTY_VALUE, rec.id)
    if not any(m["role"] == "assistant" for m in rec.conversations):
        raise RecordError(path, rec.line, None, "has no assistant turn to learn from", NO_ASSISTANT, rec.id)


def _join_same_role(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    joined: list[dict[str, str]] = []
    for msg in messages:
        if joined and joined[-1]["role"] == msg["role"]:
            joined[-1] = {"role": msg["role"], "content": joined[-1]["content"] + JOINER + msg["content"]}
        else:
            joined.append(dict(msg))
    return joined


def iter_records(path: Path, source: str, policy: SourcePolicy, report: SourceReport) -> Iterator[ChatRecord]:
    """Every usable record of `path` (a file, or a folder of them), in file order; `report`
    counts the rest. Raises RecordError (strict) or SourceError (past max_invalid, or an array
    that cannot be read on) when the source cannot be used."""
    report.policy = policy
    report.source = report.source or source
    seen: set[bytes] = set()
    skipped_ids: set[bytes] = set()
    for file in source_files(Path(path)):
        name = str(file)
        report.files.append(name)
        for value, line, fallback in _raw_records(file, source, policy, report):
            report.records += 1
            try:
                if isinstance(value, RecordError):
                    raise value
                rec = record_from_obj(value, name, line, fallback, policy.role_map)
                _check(rec, name)
            except RecordError as exc:
                if policy.strict:
                    raise
                report.skipped[exc.reason] += 1
                report.note(exc.reason, name, line, exc.record_id)
                report.first_problem.setdefault(exc.reason, str(exc))
                if exc.record_id is not None:
                    skipped_ids.add(_id_key(exc.record_id))
                continue
            first = next((m["role"] for m in rec.conversations if m["role"] != "system"), None)
            if first == "assistant":
                report.policies[ASSISTANT_FIRST] += 1
                report.note(ASSISTANT_FIRST, name, line, rec.id)
                if policy.on_assistant_first == "drop":
                    continue
            conv = rec.conversations
            if any(a["role"] == b["role"] for a, b in zip(conv, conv[1:])):
                report.policies[SAME_ROLE] += 1
                report.note(SAME_ROLE, name, line, rec.id)
                if policy.same_role == "drop":
                    continue
                rec = ChatRecord(rec.id, _join_same_role(conv), rec.line, rec.shape)
            key = _id_key(rec.id)
            if key in seen:
                report.policies[DUPLICATE_ID] += 1
                report.note(DUPLICATE_ID, name, line, rec.id)
                continue
            seen.add(key)
            if key in skipped_ids:
                report.policies[REPEATS_SKIPPED] += 1
                report.note(REPEATS_SKIPPED, name, line, rec.id)
            report.usable += 1
            yield rec
    share = report.invalid_share()
    if share > policy.max_invalid:
        raise SourceError(
            f"{path}: {report.invalid()} of {report.records} records ({share:.1%}) are unusable, more than "
            f"--max-invalid {policy.max_invalid:g} ({policy.max_invalid:.1%}): {report.top_reasons()}. "
            "Is it the right file? Raise --max-invalid to read it anyway"
        )
