"""The command line of `python -m pipeline.regenerate --synthesize N`, parsed into one frozen
SynthOptions (defaults written once; `validate()` only refuses). Every option that costs time
or memory has a bound; a value past it is exit 2 with the flag, the value and the range."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline import cpu_threads
from pipeline.jsonfile import read_json
from pipeline.regenerate.errors import BadInput
from pipeline.regenerate.options import MAX_BATCH, MAX_NEW_TOKENS, _bound, dtype_for, stats_beside

PROG = "python -m pipeline.regenerate"
MAX_RECORDS = 2_000_000  # the duplicate index holds about 2 KB a kept question: 4 GB at the bound
MAX_TURNS = 8
MAX_SYSTEM_PROMPTS = 10_000
MAX_SYSTEM_CHARS = 8_000
SYSTEM_FILE_BYTES = 4 << 20
MAX_DROPPED_SHARE = 0.95
# What the records depend on: a resumed run must use the same, or its records would mix. The
# record count is not among them: a larger --synthesize extends the output, the first records unchanged.
GENERATION_KEYS = ("model", "seed", "question_temperature", "temperature", "top_p", "max_question_tokens",
                   "max_new_tokens", "max_prompt_tokens", "turns", "min_question_chars", "near_duplicate",
                   "trim_loops", "system_prompts_sha256")


@dataclass(frozen=True)
class SynthOptions:
    """What a synthesis was asked for, every default filled in: the stats and the resume read these."""

    records: int
    out: Path
    stats: Path
    model: Path
    system_prompts: tuple[str, ...] = ()
    system_prompts_file: Path | None = None
    device: str = "cpu"
    dtype: str = "fp32"
    batch_size: int = 16
    max_prompt_tokens: int | None = None
    turns: int = 1
    max_question_tokens: int = 256
    max_new_tokens: int = 2048
    question_temperature: float = 1.0
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    trim_loops: bool = False
    min_question_chars: int = 8
    near_duplicate: float = 0.8
    max_dropped_share: float = 0.5
    threads: int | None = None  # torch's CPU threads (None: pipeline/cpu_threads.py chooses)

    @classmethod
    def from_flags(cls, a: argparse.Namespace) -> SynthOptions:
        """The parsed flags, with the defaults that follow other flags filled in here and nowhere
        else (the stats beside --out, the dtype by --device) and the system prompts read."""
        prompts = read_system_prompts(a.system_prompts) if a.system_prompts is not None else ()
        return cls(
            records=a.synthesize, out=a.out, stats=a.stats or stats_beside(a.out), model=a.model,
            system_prompts=prompts, system_prompts_file=a.system_prompts, device=a.device,
            dtype=a.dtype or dtype_for(a.device), batch_size=a.batch_size, max_prompt_tokens=a.max_prompt_tokens,
            turns=a.turns, max_question_tokens=a.max_question_tokens, max_new_tokens=a.max_new_tokens,
            question_temperature=a.question_temperature, temperature=a.temperature, top_p=a.top_p, seed=a.seed,
            trim_loops=a.trim_loops, min_question_chars=a.min_question_chars, near_duplicate=a.near_duplicate,
            max_dropped_share=a.max_dropped_share, threads=a.threads)

    def validate(self) -> None:
        """BadInput for a value past its bound; nothing is filled in."""
        _bound("--synthesize", self.records, 0, MAX_RECORDS)
        _bound("--batch-size", self.batch_size, 1, MAX_BATCH)
        if self.max_prompt_tokens is not None:
            _bound("--max-prompt-tokens", self.max_prompt_tokens, 1, 10**7)
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise BadInput(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")
        _bound("--turns", self.turns, 1, MAX_TURNS)
        _bound("--max-question-tokens", self.max_question_tokens, 1, MAX_NEW_TOKENS)
        _bound("--max-new-tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        if not 0 < self.question_temperature <= 2:
            raise BadInput(f"--question-temperature must be above 0 and at most 2, got {self.question_temperature:g}: "
                           "greedy questions are the same question for every record")
        _bound("--temperature", self.temperature, 0, 2)
        if not 0 < self.top_p <= 1:
            raise BadInput(f"--top-p must be more than 0 and at most 1, got {self.top_p:g}")
        _bound("--seed", self.seed, 0, 2**63 - 1)
        _bound("--min-question-chars", self.min_question_chars, 0, 10**6)
        _bound("--near-duplicate", self.near_duplicate, 0, 1)
        _bound("--max-dropped-share", self.max_dropped_share, 0, MAX_DROPPED_SHARE)

    @property
    def max_asked(self) -> int:
        """Record indexes the output may use: past them with fewer records kept, the run failed."""
        return math.ceil(self.records / (1 - self.max_dropped_share))

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("out", "stats", "model", "system_prompts_file"):
            d[k] = None if d[k] is None else str(d[k])
        d["system_prompts"] = len(self.system_prompts)
        d["system_prompts_sha256"] = hashlib.sha256(json.dumps(self.system_prompts).encode()).hexdigest()
        return d

    def generation(self) -> dict:
        d = self.to_json()
        return {k: d[k] for k in GENERATION_KEYS}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Records whose user turns the target writes itself (its "
                                "chat template up to a user turn), each answered by the target as regenerate "
                                "answers; filtered, deduplicated, resumable. docs/datasets.md, 'Growing the data "
                                "with the target'.")
    p.add_argument("--synthesize", required=True, type=int, metavar="N",
                   help=f"records to write (0..{MAX_RECORDS}: 0 writes an empty output and loads nothing); a rerun "
                   "resumes, a larger N extends the output")
    p.add_argument("--out", required=True, type=Path, help="output JSONL; rerunning the same command resumes it")
    p.add_argument("--stats", type=Path, help="stats JSON (default <out stem>.stats.json beside --out)")
    p.add_argument("--backend", default="hf", choices=["hf"], help="the target runs in this process (the only one)")
    h = p.add_argument_group("the target")
    h.add_argument("--model", required=True, type=Path, help="the target's save_pretrained folder, with a chat "
                   "template")
    h.add_argument("--device", default=SynthOptions.device, help=f"cpu, cuda or cuda:N (default {SynthOptions.device})")
    h.add_argument("--dtype", default=None, choices=["bf16", "fp16", "fp32"],
                   help="weights' dtype (default fp32 on cpu, bf16 on cuda)")
    h.add_argument("--batch-size", type=int, default=SynthOptions.batch_size,
                   help=f"slots: records generated together (1..{MAX_BATCH}, "
                   f"default {SynthOptions.batch_size}; as regenerate's)")
    h.add_argument("--max-prompt-tokens", type=int, help="drop a record whose next prompt is longer, counted as "
                   "prompt_too_long (default: the target's positions less --max-new-tokens)")
    q = p.add_argument_group("questions")
    q.add_argument("--system-prompts", type=Path, metavar="FILE",
                   help=f"a JSON array of system prompts (at most {MAX_SYSTEM_PROMPTS}, {MAX_SYSTEM_CHARS} characters "
                   "each); each record starts with one drawn by its seed; \"\" draws none (default: none)")
    q.add_argument("--turns", type=int, default=SynthOptions.turns,
                   help=f"user turns a record holds (1..{MAX_TURNS}, default {SynthOptions.turns}): "
                   "after each answer the target writes the next question")
    q.add_argument("--max-question-tokens", type=int, default=SynthOptions.max_question_tokens,
                   help="longest question; one that runs to it is "
                   f"dropped as unfinished (default {SynthOptions.max_question_tokens})")
    q.add_argument("--question-temperature", type=float, default=SynthOptions.question_temperature,
                   help=f"questions' sampling temperature, above 0 (default {SynthOptions.question_temperature})")
    q.add_argument("--min-question-chars", type=int, default=SynthOptions.min_question_chars,
                   help="shorter questions (stripped) are dropped as too_short "
                   f"(default {SynthOptions.min_question_chars})")
    q.add_argument("--near-duplicate", type=float, default=SynthOptions.near_duplicate, metavar="SIMILARITY",
                   help="a first question this similar to a kept one (Jaccard of character 5-grams, estimated) is "
                   f"dropped as near_duplicate; 0 turns it off; exact duplicates are always dropped (default "
                   f"{SynthOptions.near_duplicate})")
    q.add_argument("--max-dropped-share", type=float, default=SynthOptions.max_dropped_share,
                   help=f"the share of records the filters may drop (0..{MAX_DROPPED_SHARE}, "
                   f"default {SynthOptions.max_dropped_share}): past "
                   "N / (1 - share) records asked with fewer than N kept, the run fails (exit 4)")
    g = p.add_argument_group("answers (as regenerate answers)")
    g.add_argument("--max-new-tokens", type=int, default=SynthOptions.max_new_tokens,
                   help=f"longest answer, in tokens (default {SynthOptions.max_new_tokens})")
    g.add_argument("--temperature", type=float, default=SynthOptions.temperature,
                   help=f"answers' temperature; 0 is greedy (default {SynthOptions.temperature})")
    g.add_argument("--top-p", type=float, default=SynthOptions.top_p,
                   help=f"nucleus sampling, questions and answers (default {SynthOptions.top_p})")
    g.add_argument("--seed", type=int, default=SynthOptions.seed,
                   help="every draw derives from it and the record's id, so a resumed "
                   f"run writes the same records (default {SynthOptions.seed})")
    g.add_argument("--trim-loops", action="store_true",
                   help="stop a generation at the token that completes an exact loop (docs/regenerate.md); a "
                   "looping question is dropped either way")
    cpu_threads.add_option(p)
    return p


def read_system_prompts(path: Path) -> tuple[str, ...]:
    got = read_json(path, f"--system-prompts {path} does not exist; write a JSON array of system prompts there",
                    SYSTEM_FILE_BYTES)
    if not isinstance(got, list) or not got:
        raise BadInput(f"--system-prompts {path}: expected a non-empty JSON array of strings, "
                       f"got {type(got).__name__ if not isinstance(got, list) else 'an empty array'}")
    if len(got) > MAX_SYSTEM_PROMPTS:
        raise BadInput(f"--system-prompts {path}: {len(got)} prompts, more than {MAX_SYSTEM_PROMPTS}")
    for i, s in enumerate(got):
        if not isinstance(s, str):
            raise BadInput(f"--system-prompts {path}: item {i} is {type(s).__name__}, not a string")
        if len(s) > MAX_SYSTEM_CHARS or "\0" in s:
            raise BadInput(f"--system-prompts {path}: item {i} is longer than {MAX_SYSTEM_CHARS} characters "
                           "or holds a NUL")
        try:
            s.encode()
        except UnicodeEncodeError:
            raise BadInput(f"--system-prompts {path}: item {i} holds a lone surrogate, not UTF-8 text") from None
    return tuple(got)


def parse(argv: list[str]) -> SynthOptions:
    """The options of a command line, its defaults filled in (`SynthOptions.from_flags`, which reads
    --system-prompts); argparse's own errors exit 2 with its usage."""
    return SynthOptions.from_flags(build_parser().parse_args(argv))
