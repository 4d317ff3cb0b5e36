"""`python -m pipeline.regenerate`: the stage's edge and its order of work.

    python -m pipeline.regenerate SOURCE [SOURCE ...] --out OUT.jsonl [--stats STATS.json]
        --backend hf --model TARGET_DIR [--device cpu|cuda] [--dtype bf16|fp16|fp32] [--batch-size N]
        --backend server --server URL [--server URL ...] [--served-model NAME] [--concurrency N]
                 [--timeout S] [--retries N] [--max-consecutive-failures N]
        [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S] [--samples-per-prompt N] [--trim-loops]
        [--limit N]
        [--role-map a=b,...] [--max-invalid SHARE] [--strict]
    python -m pipeline.regenerate --estimate SOURCE ... [--limit N] [--max-new-tokens N] [--json]
    python -m pipeline.regenerate --synthesize N --out OUT.jsonl --model TARGET_DIR ...   (synthesis/main.py:
        records whose questions the target writes too)

Exit codes: 0 done (a record that failed is counted in the stats, not fatal), 1 a bug,
2 bad input, 3 the disk filled, 4 a server died (after --max-consecutive-failures failed
requests in a row, or unreachable at the start) or the run failed as a whole (more than
--max-failed-share of its records failed, or it wrote no record: stats `status: failed`),
130 interrupted, 143 terminated. After any of them the same command resumes: records already
in OUT are kept and not asked again; the failed ones are asked again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from itertools import islice

from pipeline import output_guard
from pipeline.events import EventWriter, warn
from pipeline.program_edge import on_sigterm, run_program
from pipeline.records import regenerate_stats

from . import options as opts_mod
from . import sources
from .backends import open_backend
from .conversation import Chat
from .errors import BadInput, PeerDead
from .estimate import run as estimate
from .output import done_ids, open_appender, repair_tail
from .sink import OutputSink, drive
from .stats import Stats, previous
from .synthesis.main import body as synthesize

NAME = "regenerate"
RESUME = "the records written so far are kept; rerun the same command to resume"
STATS_KEYS = regenerate_stats.KIND.legacy_keys  # what makes a stats file regenerate's own
NOT_COUNTED = ("prompt_too_long",)  # the data's own size, as fixed as a skip: not a failure of the run


def sample_ids(rid: str, n: int) -> list[str]:
    """The output ids of a record's samples: its own id when there is one sample."""
    return [rid] if n == 1 else [f"{rid}#s{k}" for k in range(n)]


def _records(o: opts_mod.Options, pol) -> Iterator:
    stream = sources.records(o.sources, pol)
    return islice(stream, o.limit) if o.limit is not None else stream


def _todo(o: opts_mod.Options, pol, done: set[str]) -> Iterator[Chat]:
    index = 0
    for rec in _records(o, pol):
        for rid in sample_ids(rec.id, o.samples_per_prompt):
            if rid in done:
                continue
            yield Chat.start(index, rid, rec.conversations)
            index += 1


def body(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--synthesize" in args or any(a.startswith("--synthesize=") for a in args):
        return synthesize(args)
    if "--estimate" in args:

        return estimate(args)
    o = opts_mod.parse(args)
    if o.out.is_dir():
        raise BadInput(f"--out {o.out} is a folder; name the output file (e.g. {o.out}/regenerated.jsonl)")
    inputs = [*o.sources, o.model]
    output_guard.refuse_overlap(o.out, inputs)
    output_guard.refuse_overlap(o.stats, inputs, "--stats")
    output_guard.refuse_foreign_file(o.out, o.stats, STATS_KEYS, NAME)
    output_guard.refuse_foreign_stats(o.stats, STATS_KEYS, NAME)
    # opened once, before the wait for the server; the Appender closes it (an error exits the process)
    return _run(o, output_guard.open_output(o.out, create=False))


def _verdict(o: opts_mod.Options, stats: Stats, asked: int) -> str | None:
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


def _run(o: opts_mod.Options, fd: int | None) -> int:
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
    sink = OutputSink(out, stats, o.stats, events, wanted)
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


def main(argv: list[str] | None = None) -> int:
    # a stop raises Terminated wherever the main thread is; the `finally` above flushes what was
    # answered and writes the stats, and the Appender never writes a record twice
    with on_sigterm():
        return run_program(NAME, lambda: body(argv), stop_note=RESUME)


if __name__ == "__main__":
    sys.exit(main())
