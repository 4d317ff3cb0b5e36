"""A regenerate run: the sources' records asked of the backend `--backend` names, in input
order, into an output that a rerun of the same command resumes. What a run that failed as a
whole is (`_verdict`) is decided here, once the backend is done."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import islice

from pipeline import output_guard
from pipeline.chat.records import ChatRecord
from pipeline.chat.sources import SourcePolicy
from pipeline.events import EventWriter, warn
from pipeline.records import regenerate_stats
from pipeline.regenerate import sources
from pipeline.regenerate.backends import open_backend
from pipeline.regenerate.conversation import Chat
from pipeline.regenerate.errors import BadInput, PeerDead
from pipeline.regenerate.options import Options
from pipeline.regenerate.output import done_ids, open_appender, repair_tail
from pipeline.regenerate.sink import RegenerateSink, drive
from pipeline.regenerate.stats import Stats, previous

NAME = "regenerate"
STATS_KEYS = regenerate_stats.KIND.legacy_keys  # what makes a stats file regenerate's own
NOT_COUNTED = ("prompt_too_long",)  # the data's own size, as fixed as a skip: not a failure of the run


def sample_ids(rid: str, n: int) -> list[str]:
    """The output ids of a record's samples: its own id when there is one sample."""
    return [rid] if n == 1 else [f"{rid}#s{k}" for k in range(n)]


def _records(o: Options, pol: SourcePolicy) -> Iterator[ChatRecord]:
    stream = sources.records(o.sources, pol)
    return islice(stream, o.limit) if o.limit is not None else stream


def _todo(o: Options, pol: SourcePolicy, done: set[str]) -> Iterator[Chat]:
    index = 0
    for rec in _records(o, pol):
        for rid in sample_ids(rec.id, o.samples_per_prompt):
            if rid in done:
                continue
            yield Chat.start(index, rid, rec.conversations)
            index += 1


def regenerate(o: Options) -> int:
    """Answer every user turn of the sources into `o.out`, resuming what it holds."""
    if o.out.is_dir():
        raise BadInput(f"--out {o.out} is a folder; name the output file (e.g. {o.out}/regenerated.jsonl)")
    inputs = [*o.sources, *([o.model] if o.model is not None else [])]
    output_guard.refuse_overlap(o.out, inputs)
    output_guard.refuse_overlap(o.stats, inputs, "--stats")
    output_guard.refuse_foreign_file(o.out, o.stats, STATS_KEYS, NAME)
    output_guard.refuse_foreign_stats(o.stats, STATS_KEYS, NAME)
    # opened once, before the backend opens; the Appender closes it (an error exits the process)
    return _run(o, output_guard.open_output(o.out, create=False))


def _verdict(o: Options, stats: Stats, asked: int) -> str | None:
    """Why this run failed as a whole, or None: a run that wrote nothing, or past --max-failed-share."""
    failed = sum(n for k, n in stats.failures.items() if k not in NOT_COUNTED)
    why = ", ".join(f"{n} {k}" for k, n in stats.failures.most_common(3))
    if stats.wanted and not stats.records_out:
        return (f"wrote no record: {asked} asked, every one failed ({why or 'no answer'}; see {o.stats}); "
                "fix the server or the flags and rerun the same command")
    if asked and failed / asked > o.max_failed_share:
        return (f"{failed} of {asked} records failed ({failed / asked:.1%}), more than --max-failed-share "
                f"{o.max_failed_share:g}: {why} (see {o.stats}); the {stats.records_out} records written are kept; "
                "fix the cause and rerun the same command to ask the failed ones again")
    return None


def _run(o: Options, fd: int | None) -> int:
    pol = sources.policy(o.role_map, o.max_invalid, o.strict)
    backend = open_backend(o)  # before anything is written: a backend refused leaves no output behind
    done: set[str] = set()
    old = None
    if fd is not None:
        output_guard.refuse_replaced(fd, o.out)  # swapped while the backend opened: never followed
        cut = repair_tail(fd)
        if cut:
            print(f"{NAME}: {o.out}: cut a torn last line of {cut} bytes left by an interrupted run", flush=True)
        done, _ = done_ids(fd, o.out)
        if done:
            old = previous(o.stats, o.generation())
    plan = sources.Plan()
    counted = sum(1 for _ in sources.records(o.sources, pol, plan))
    wanted = (min(counted, o.limit) if o.limit is not None else counted) * o.samples_per_prompt
    stats = Stats(options=o.to_json(), records_in=plan.records_in(), regenerable=counted, wanted=wanted,
                  skipped=+plan.skipped, sources=plan.to_record())
    stats.seconds_before = old.seconds if old is not None else 0.0
    stale = len(done)
    stats.resumed = min(stale, wanted)
    for warning in plan.warnings():
        warn(NAME, warning)
    skipped = ", ".join(f"{n} {k}" for k, n in sorted(plan.skipped.items()) if n)
    print(f"{NAME}: {counted} records to regenerate" + (f" (skipped: {skipped})" if skipped else "")
          + (f", {stats.resumed} already in {o.out}" if stale else "")
          + (f"; --limit {o.limit}" if o.limit is not None else "")
          + (f"; {o.samples_per_prompt} samples each" if o.samples_per_prompt > 1 else ""), flush=True)
    out = open_appender(o.out, o.stats, fd, STATS_KEYS, NAME)
    events = EventWriter.from_env()
    sink = RegenerateSink(out, stats, o.stats, events, wanted)
    stats.write(o.stats)
    started = time.monotonic()

    def work() -> None:
        backend.run(_todo(o, pol, done), sink)
        sink.flush()
        if done and out.records:  # a resumed run appended: a record it retried may belong before others
            moved = out.keep_input_order(rid for rec in _records(o, pol)
                                         for rid in sample_ids(rec.id, o.samples_per_prompt))
            if moved:
                print(f"{NAME}: {o.out}: put the records back in input order ({moved} lines moved)", flush=True)

    failed_run = drive(sink, work, lambda: _verdict(o, stats, sink.next))
    took = time.monotonic() - started
    fails = ", ".join(f"{n} {k}" for k, n in sorted(stats.failures.items()))
    print(f"{NAME}: wrote {out.records} records ({stats.records_out} in {o.out}), {stats.generated_tokens} tokens "
          f"generated in {took:.1f} s"
          + (f"; {stats.loops_cut} looping answers cut, {stats.loop_tokens_cut} tokens" if o.trim_loops else "")
          + (f"; failed: {fails} (see {o.stats})" if fails else ""), flush=True)
    if failed_run:
        raise PeerDead(failed_run)
    return 0
