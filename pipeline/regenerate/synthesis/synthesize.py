"""`python -m pipeline.regenerate --synthesize N`: records whose questions the target wrote.

    python -m pipeline.regenerate --synthesize N --out OUT.jsonl [--stats STATS.json] --model TARGET_DIR
        [--device cpu|cuda] [--dtype bf16|fp16|fp32] [--batch-size N] [--max-prompt-tokens N]
        [--system-prompts FILE] [--turns N] [--max-question-tokens N] [--question-temperature T]
        [--min-question-chars N] [--near-duplicate SIMILARITY] [--max-dropped-share SHARE]
        [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S] [--trim-loops]
    python -m pipeline.regenerate --synthesize N --estimate [--turns N] [--max-question-tokens N]
        [--max-new-tokens N] [--system-prompts FILE] [--json]

The output is the first N records, in the order of their numbers, that every filter let
through (chat.py, questions.py, dedup.py): record k is `synth-<seed>-<k>`, its draws seeded by
that id. Exit codes as regenerate's: 0 done, 2 bad input (a template a user turn cannot be cut
from included), 3 the disk filled, 4 fewer than N records kept after N / (1 - share) were
asked, 130 interrupted, 143 terminated. After any of them the same command resumes: records in
OUT are kept, and the rest (the dropped ones too, which their seeds drop again) are asked
again, so the output is the same file as an uninterrupted run's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline import cpu_threads, output_guard
from pipeline.events import EventWriter
from pipeline.records.synthesis_stats import SynthesisStats, read_stats
from pipeline.regenerate.errors import BadInput, PeerDead
from pipeline.regenerate.output import done_ids, open_appender, repair_tail
from pipeline.regenerate.sink import drive
from pipeline.regenerate.stats import previous
from pipeline.regenerate.synthesis import estimate
from pipeline.regenerate.synthesis.chat import Questions, SynthChat, index_of
from pipeline.regenerate.synthesis.dedup import Seen
from pipeline.regenerate.synthesis.options import SynthOptions, parse
from pipeline.regenerate.synthesis.sink import SynthSink
from pipeline.regenerate.synthesis.stats import KEYS, SynthStats

if TYPE_CHECKING:
    from pipeline.regenerate.synthesis.backend import SynthBackend

NAME = "regenerate"


def body(args: list[str]) -> int:
    if "--estimate" in args:
        return estimate.run(args)
    o = parse(args)
    o.validate()
    if o.out.is_dir():
        raise BadInput(f"--out {o.out} is a folder; name the output file (e.g. {o.out}/synthesized.jsonl)")
    inputs = [o.model, *([o.system_prompts_file] if o.system_prompts_file else [])]
    output_guard.refuse_overlap(o.out, inputs)
    output_guard.refuse_overlap(o.stats, inputs, "--stats")
    output_guard.refuse_foreign_file(o.out, o.stats, KEYS, NAME)
    output_guard.refuse_foreign_stats(o.stats, KEYS, NAME)
    return _run(o, output_guard.open_output(o.out, create=False))


def _resume(o: SynthOptions, fd: int, seen: Seen) -> tuple[set[str], SynthesisStats | None]:
    """The ids already in the output, their first questions in `seen`, and the earlier stats."""
    output_guard.refuse_replaced(fd, o.out)
    cut = repair_tail(fd)
    if cut:
        print(f"{NAME}: {o.out}: cut a torn last line of {cut} bytes left by an interrupted run", flush=True)
    old = previous(o.stats, o.generation(), read_stats) if os.fstat(fd).st_size else None  # other options: said first

    def each(line: int, rec: dict) -> None:
        rid = rec["id"]
        number = index_of(rid, o.seed)
        conv = rec.get("conversations")
        first = next((m.get("content") for m in conv if isinstance(m, dict) and m.get("role") == "user"), None) \
            if isinstance(conv, list) else None
        if number is None or not isinstance(first, str):
            raise BadInput(f"{o.out}:{line}: record {str(rid)[:80]!r} is not one this synthesis wrote (--seed "
                           f"{o.seed}: ids synth-{o.seed}-<k>, a user turn first); choose another --out")
        seen.add(Seen.key(first), number, rid)

    done, _ = done_ids(fd, o.out, each)
    return done, old


def _todo(o: SynthOptions, done: set[str], sink: SynthSink, judge: Questions, stats: SynthStats) -> Iterator[SynthChat]:
    """The records to ask, in number order, until the output is full or the numbers run out."""
    index = 0
    for number in range(o.max_asked):
        if sink.full:
            return
        chat = SynthChat.start(index, number, o.seed, o.system_prompts, o.turns, o.max_new_tokens, judge)
        if chat.id in done:
            continue
        stats.asked += 1
        index += 1
        yield chat


def _verdict(o: SynthOptions, stats: SynthStats, kept: int) -> str | None:
    if kept >= o.records:
        return None
    why = ", ".join(f"{n} {k}" for k, n in stats.dropped.most_common(3))
    return (f"{kept} of {o.records} records kept after all {o.max_asked} numbers were asked (--max-dropped-share "
            f"{o.max_dropped_share:g}): dropped {why or 'none'} (see {o.stats}); the records written are kept; "
            "loosen the filter that drops most, or give --system-prompts, and rerun the same command")


def _target(o: SynthOptions, done: set[str]) -> SynthBackend | None:
    """The target, loaded (and its template checked) before anything is written, so a target
    refused leaves no output behind; None when the output already holds --synthesize records
    (--synthesize 0, a phase switched off, writes an empty output without loading it)."""
    if len(done) >= o.records:
        print(f"{NAME}: {o.out} holds {len(done)} records of the {o.records} asked for: nothing to synthesize",
              flush=True)
        return None
    cpu_threads.fit(NAME, o.threads)
    from pipeline.regenerate.synthesis.backend import SynthBackend  # torch and transformers: only once there is work

    backend = SynthBackend(o.model, o.device, o.dtype, max(o.max_new_tokens, o.max_question_tokens), o.temperature,
                           o.top_p, o.max_prompt_tokens, o.trim_loops, o.system_prompts, seed=o.seed,
                           slots=o.batch_size)
    print(f"{NAME}: synthesizing {o.records} records of {o.turns} user turn{'s' if o.turns > 1 else ''} with "
          f"{o.model} (a user turn ends at {' or '.join(backend.turn_ends)}"
          + (f"; {len(o.system_prompts)} system prompts" if o.system_prompts else "") + ")"
          + (f", {len(done)} already in {o.out}" if done else ""), flush=True)
    return backend


def _run(o: SynthOptions, fd: int | None) -> int:
    seen = Seen(o.near_duplicate)
    done: set[str] = set()
    old = None
    if fd is not None:
        done, old = _resume(o, fd, seen)
    stats = SynthStats(options=o.to_json(), wanted=o.records, max_asked=o.max_asked, resumed=len(done))
    stats.seconds_before = old.seconds if old is not None else 0.0
    backend = _target(o, done)
    out = open_appender(o.out, o.stats, fd, KEYS, NAME)
    events = EventWriter.from_env()
    sink = SynthSink(out, stats, o.stats, events, seen)
    stats.write(o.stats)

    def work() -> None:
        if backend is None:
            return
        judge = Questions(backend.controls, o.min_question_chars, o.max_question_tokens, o.question_temperature,
                          seen)
        backend.run(_todo(o, done, sink, judge, stats), sink)

    started = time.monotonic()
    short = drive(sink, work, lambda: _verdict(o, stats, sink.kept))
    took = time.monotonic() - started
    dropped = ", ".join(f"{n} {k}" for k, n in sorted(stats.dropped.items()))
    print(f"{NAME}: wrote {out.records} records ({stats.records_out} in {o.out}); asked {stats.asked}"
          + (f", dropped {dropped}" if dropped else "")
          + f"; {stats.question_tokens} question and {stats.generated_tokens - stats.question_tokens} answer tokens "
          f"generated in {took:.1f} s ({stats.generated_tokens / max(took, 1e-9):.0f} tokens/s)", flush=True)
    if short:
        raise PeerDead(short)
    return 0
