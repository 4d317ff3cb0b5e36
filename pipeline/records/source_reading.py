"""What reading one chat source found (`pipeline.chat.sources.SourceReport`): records met and
usable, skipped by reason with examples, the policies applied, the cut of an unfinished JSON
array. Not a record of its own: merge's stats hold one per source (`input`), regenerate's
stats one per source (`sources`), so both say it the same way."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyCount:
    records: int
    action: str


@dataclass(frozen=True)
class DuplicateIds:
    records: int
    action: str
    kept_after_a_skipped_one: int


@dataclass(frozen=True)
class ArrayCut:
    """A JSON array source that ends inside a record: read up to `byte` (line `line`)."""

    file: str
    byte: int
    line: int


@dataclass(frozen=True)
class SourceReading:
    files: tuple[str, ...]
    records: int  # met: usable, skipped, left out by a policy, and lines too long to read
    usable: int
    invalid: int
    invalid_share: float
    skipped: dict[str, int]  # by reason
    assistant_first: PolicyCount
    duplicate_id: DuplicateIds
    same_role: PolicyCount
    lines_too_long: int
    cut: tuple[ArrayCut, ...]
    examples: dict[str, tuple[str, ...]]  # by reason, a few `file:line (id ...)`
    first_problem: dict[str, str]  # by reason, the whole message of the first record skipped
    role_map: dict[str, str]
