"""The evaluate report: `python -m pipeline.evaluate --report OUT.json`, read by the console's
acceptance bars and by bench. docs/export-evaluate.md says what each figure means.

Two shapes, told apart by `mode`: a local evaluation (`LocalReport`: the exported drafter and
the target decoded here, every setting of a sweep, the untrained baseline when asked) and a
server's (`ServerReport`: SGLang's own `spec_accept_length`). A report's figures are finite:
the writer refuses NaN and infinities (a bug), so no reader meets them.

`write_report` is the one writer, `read_report` the one reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from pipeline.records.codec import Kind

VERSION = 1
KIND = Kind(tag="evaluate_report", title="evaluate report", writer="python -m pipeline.evaluate --report",
            version=VERSION, known=(1,), legacy_keys=("mode", "per_prompt"), finite=True, limit=32 << 20)


@dataclass(frozen=True)
class TargetForwards:
    speculative: int
    greedy: int


@dataclass(frozen=True, kw_only=True)
class Figures:
    """One drafter's acceptance at one setting over every prompt (pipeline/evaluate/report.py)."""

    num_steps: int
    prompts: int
    tokens: int
    verify_rounds: int
    acceptance_length: float
    accept_rate: tuple[float, ...]  # per draft position, of the rounds that reached it
    accept_prob: tuple[float, ...]  # per draft position, of all rounds
    target_forwards: TargetForwards
    speedup_forwards: float


@dataclass(frozen=True, kw_only=True)
class SettingRow(Figures):
    """One SGLang setting of a sweep (steps, topk, draft tokens)."""

    setting: str
    topk: int
    num_draft_tokens: int
    flags: str
    target_forwards_saved: int
    speedup_estimate: float | None


@dataclass(frozen=True, kw_only=True)
class Baseline(Figures):
    """The untrained drafter training starts from, on the same prompts (`--baseline`)."""

    drafter: str
    settings: tuple[SettingRow, ...]


@dataclass(frozen=True)
class Best:
    setting: str
    flags: str  # the SGLang flags that serve it, also the last line evaluate prints


@dataclass(frozen=True)
class ForwardTimes:
    """Milliseconds of a target forward by tokens verified, and of a drafter forward by rows."""

    target_by_tokens: dict[str, float]
    drafter_by_rows: dict[str, float]


@dataclass(frozen=True)
class FileFingerprint:
    bytes: int  # -1: the file could not be read
    sha256: str


@dataclass(frozen=True)
class PromptFigures:
    id: str
    prompt_tokens: int
    new_tokens: int
    acceptance_length: float | None  # None: no verify round (the answer ended at once)
    baseline_acceptance_length: float | None = None


@dataclass(frozen=True, kw_only=True)
class LocalReport(Figures):
    """A local evaluation; its own figures are the first setting's, of the trained drafter
    (or of the baseline alone when no drafter was given)."""

    mode: Literal["local"] = "local"
    drafter: str
    target: str
    prompts_source: str
    excluded_as_training: int
    too_long: int
    max_new_tokens: int
    output_equals_greedy: bool
    kv_cache: bool
    target_positions_run: int
    greedy_references_kept: int
    batch: int
    redecoded_one_by_one: int
    decode_seconds: float
    drafter_files: dict[str, FileFingerprint] | None = None
    baseline: Baseline | None = None
    forward_ms: ForwardTimes
    settings: tuple[SettingRow, ...]
    best: Best
    per_prompt: tuple[PromptFigures, ...]
    seconds: float | None = None  # the whole run's, set last
    version: int = field(default=VERSION, init=False)


@dataclass(frozen=True)
class ServerPrompt:
    id: str
    spec_accept_length: float
    spec_verify_ct: int | None
    completion_tokens: int | None


@dataclass(frozen=True, kw_only=True)
class ServerReport:
    """A running SGLang server's own acceptance (`--server URL`)."""

    mode: Literal["server"] = "server"
    server: str
    excluded_as_training: int
    prompts: int
    mean_spec_accept_length: float
    completion_tokens: int | None = None  # the three token-weighted figures, when every response gave its counts
    verify_ct: int | None = None
    token_weighted_accept_length: float | None = None
    per_prompt: tuple[ServerPrompt, ...]
    seconds: float | None = None
    version: int = field(default=VERSION, init=False)

    @property
    def acceptance_length(self) -> float:
        return self.mean_spec_accept_length


Report = LocalReport | ServerReport


def write_report(path: str | os.PathLike[str], report: Report) -> None:
    """Atomically; NotFinite (nothing written) for a NaN or infinite figure."""
    KIND.write(path, report)


def read_report(path: str | os.PathLike[str], missing: str | None = None) -> Report:
    """The report at `path`; a RecordError naming the file when it is missing (`missing` says
    what to do instead of the default), not a report, of an unknown version or malformed."""
    obj = KIND.load(path, missing)
    if obj.get("mode") == "server":
        return KIND.decode(ServerReport, obj, os.fspath(path))
    return KIND.decode(LocalReport, obj, os.fspath(path))
