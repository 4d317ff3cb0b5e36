"""`python -m pipeline.evaluate`: how many tokens an exported drafter saves its target.

    python -m pipeline.evaluate --drafter DRAFTER --target TARGET (--prompts FILE | --demo-prompts N)
        [--baseline] [--exclude TRAIN.jsonl] [--num-steps 3 | --configs 3,1,4 5,4,8 ...] [--limit 32]
        [--max-new-tokens 64] [--batch N] [--references DIR] [--no-kv-cache] [--report OUT.json]
    python -m pipeline.evaluate --baseline --target TARGET (--prompts FILE | --demo-prompts N) [...]
    python -m pipeline.evaluate --server URL (--prompts FILE | --demo-prompts N) [--target TARGET] [...]

Local mode loads the EXPORTED folder (what SGLang would serve) and the target with
transformers, and decodes each held-out prompt twice: plain greedy, and speculatively
(chains of --num-steps drafts, greedy verification in one target forward). It reports the
mean acceptance length (tokens per verify forward: accepted drafts + 1), the acceptance
rate per draft position, and the speedup in target forwards. Speculative output must
equal greedy output token for token; when it does not, nothing is reported (exit 3).
The target keeps a KV cache, cut back to the accepted prefix after each rejection;
--no-kv-cache runs every forward on the whole sequence (same figures, slower).

--configs STEPS,TOPK,DRAFT_TOKENS ... scores SGLang settings (trees when TOPK > 1, built and
verified as SGLang does: pipeline/evaluate/tree.py) on the same prompts against one greedy
reference each, with a wall-clock speedup estimate per setting; the last line of stdout is
the best setting's SGLang flags. An empty --configs, or more settings than --max-settings
(64), is refused before anything loads; the sweep says up front how much it decodes and,
after its first prompt, how long the rest will take. --batch N decodes chain settings N prompts at a time
(batch.py); --references DIR keeps greedy answers per target fingerprint and prompt for the
next evaluation (references.py). docs/export-evaluate.md explains the figures.

--baseline also scores the untrained drafter training starts from (same shape and
vocabulary as --drafter; without --drafter, built from the target alone), on the same
prompts against the same greedy reference: "trained X vs untrained Y".

The drafter folder's files are fingerprinted (size and SHA-256) before loading and again
before the report: a folder that changed meanwhile (a new export) gets no report (exit 2).
A drafter with NaN/Inf weights or an unreadable (truncated) model.safetensors is bad input.

--server URL instead sends the prompts to a running SGLang server's /generate and reports
the mean `spec_accept_length` of the responses' meta_info, once each response's figures agree
with each other (server.py; --num-steps, given, is the server's --speculative-num-steps).

Prompts: --prompts takes chat records (any shape merge reads; the prompt is everything up
to the first assistant turn) or merged records (the tokens before the first loss-masked
one). --demo-prompts N generates N chats with the demo's generator at --demo-seed (default
1; the demo's training data uses seed 0). --exclude drops prompts that open a record of
the given merged training set, and reports how many it dropped.

Results go to stdout, to --report as JSON, and as events to $EAGLE3_EVENTS: progress in
prompts (0 once the models are loaded, then one per prompt scored) and metrics
(acceptance_length, accept_rate_<i>, speedup_forwards; baseline_* for the baseline).

Exit codes: 0 reported, 2 bad input (missing, damaged, changed or mismatched drafter,
target, prompts or server), 3 speculative output differed from greedy output (a bug;
nothing reported), 143 stopped by SIGTERM (nothing reported; the log says how many prompts
were scored), 130 interrupted, 1 anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline import cpu_threads
from pipeline.events import EventWriter
from pipeline.program_edge import SigtermGuard, Terminated, on_sigterm, run_program
from pipeline.records.evaluate_report import (Baseline, Best, ForwardTimes, LocalReport, PromptFigures, ServerReport,
                                              SettingRow, write_report)

from . import fingerprint, server
from .errors import BadInput
from .prompts import check_ids, demo_prompts, read_file, select, training_prompts
from .references import References
from .report import describe
from .scoring import Progress, emit_metrics

PROG = "python -m pipeline.evaluate"
MAX_STEPS = 16
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 64
MAX_SETTINGS = 64  # --max-settings' default: each setting decodes every prompt again
MAX_NEW = 4096


@dataclass(frozen=True)
class EvalOptions:
    """What an evaluation was asked for: the command line's flags, checked by `_check_args`."""

    drafter: Path | None = None
    baseline: bool = False
    no_kv_cache: bool = False
    target: Path | None = None
    server: str | None = None
    prompts: Path | None = None
    demo_prompts: int | None = None
    demo_seed: int = 1
    exclude: Path | None = None
    num_steps: int | None = None
    configs: list[str] | None = None
    references: Path | None = None
    batch: int | None = None
    limit: int = 32
    max_new_tokens: int = 64
    device: str | None = None
    dtype: str = "fp32"
    report: Path | None = None
    concurrency: int = 4
    timeout: float = 300.0
    max_settings: int = MAX_SETTINGS
    threads: int | None = None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Measure an exported EAGLE-3 drafter's acceptance length.")
    p.add_argument("--drafter", type=Path, help="folder written by pipeline.export")
    p.add_argument("--baseline", action="store_true",
                   help="also score the untrained drafter training starts from (alone when no --drafter)")
    p.add_argument("--no-kv-cache", action="store_true",
                   help="run every target forward on the whole sequence (the slow reference path)")
    p.add_argument("--target", type=Path, help="target model folder (with --server: only its tokenizer is read)")
    p.add_argument("--server", metavar="URL", help="query a running SGLang server instead (e.g. http://127.0.0.1:30000)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", type=Path, help="held-out prompts: chat records or merged records (JSONL)")
    src.add_argument("--demo-prompts", type=int, metavar="N", help="N chats from the demo's generator at --demo-seed")
    p.add_argument("--demo-seed", type=int, default=1, help="seed for --demo-prompts (default 1; the demo trains on 0)")
    p.add_argument("--exclude", type=Path, metavar="TRAIN.jsonl", help="merged training set whose prompts are dropped")
    p.add_argument("--num-steps", type=int, default=None,
                   help=f"drafts per round of a chain, 1..{MAX_STEPS} (default 3; the same as --configs N,1,N+1); with "
                        "--server, the server's --speculative-num-steps, which bounds the acceptance length it reports")
    p.add_argument("--configs", nargs="+", metavar="STEPS,TOPK,DRAFT_TOKENS",
                   help="SGLang settings to sweep (--speculative-num-steps, --speculative-eagle-topk, "
                        "--speculative-num-draft-tokens), e.g. 3,1,4 5,4,8 7,8,32")
    p.add_argument("--max-settings", type=int, default=MAX_SETTINGS, metavar="N",
                   help=f"the most --configs settings one evaluation decodes (default {MAX_SETTINGS}); each decodes "
                        "every prompt again")
    p.add_argument("--references", type=Path, metavar="DIR",
                   help="keep greedy references here, per target fingerprint and prompt, so the next evaluation "
                        "of the same target does not decode them again (default: keep none)")
    p.add_argument("--batch", type=int, metavar="N",
                   help="prompts decoded in lockstep, 1..256 (default 16 on a GPU, 1 on a CPU; chains only)")
    p.add_argument("--limit", type=int, default=32, help="prompts evaluated (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=64, help=f"tokens generated per prompt, 1..{MAX_NEW} (default 64)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="compute dtype (default fp32)")
    p.add_argument("--report", type=Path, help="write the figures here as JSON")
    p.add_argument("--concurrency", type=int, default=4, help="--server: requests in flight, 1..64 (default 4)")
    p.add_argument("--timeout", type=float, default=300.0, help="--server: seconds per request (default 300)")
    cpu_threads.add_option(p)
    return p


def _check_args(args: EvalOptions) -> None:
    if args.prompts is None and args.demo_prompts is None:
        raise BadInput(f"give --prompts FILE or --demo-prompts N; see {PROG} --help")
    if args.server is None and (args.target is None or (args.drafter is None and not args.baseline)):
        raise BadInput("local evaluation needs --target and --drafter, --baseline or both (or pass --server URL)")
    if args.server is not None and (args.baseline or args.no_kv_cache or args.configs):
        raise BadInput("--baseline, --no-kv-cache and --configs are for local evaluation; drop them with --server")
    if args.num_steps is not None and not 1 <= args.num_steps <= MAX_STEPS:
        raise BadInput(f"--num-steps must be between 1 and {MAX_STEPS}, got {args.num_steps}")
    if not 1 <= args.max_new_tokens <= MAX_NEW:
        raise BadInput(f"--max-new-tokens must be between 1 and {MAX_NEW}, got {args.max_new_tokens}")
    if args.demo_prompts is not None and args.target is None:
        raise BadInput("--demo-prompts needs --target (its tokenizer renders the chats)")
    if args.batch is not None and not 1 <= args.batch <= 256:
        raise BadInput(f"--batch must be between 1 and 256, got {args.batch}")
    if not 1 <= args.concurrency <= 64:
        raise BadInput(f"--concurrency must be between 1 and 64, got {args.concurrency}")
    if not 0 < args.timeout <= 86400:
        raise BadInput(f"--timeout must be between 0 and 86400 seconds, got {args.timeout}")
    if not 1 <= args.max_settings <= 100_000:
        raise BadInput(f"--max-settings must be between 1 and 100000, got {args.max_settings}")
    if args.configs is not None:
        _refuse_unbounded(args, _setting_texts(args.configs))


def _setting_texts(configs: list[str]) -> list[str]:
    return " ".join(configs).split()  # one argument may hold several (a config variable)


def _refuse_unbounded(args: EvalOptions, texts: list[str]) -> None:
    """Before anything loads: an empty --configs, and more settings than --max-settings (each
    decodes every prompt again: 10,000 of them were about 28 hours on the tiny demo target)."""
    if not texts:
        raise BadInput("--configs names no setting; give one or more STEPS,TOPK,DRAFT_TOKENS (e.g. --configs 3,1,4 "
                       "5,4,8), or leave it out for --num-steps")
    if len(texts) > args.max_settings:
        prompts = min(args.limit, args.demo_prompts or args.limit)
        raise BadInput(f"--configs gives {len(texts)} settings, more than --max-settings {args.max_settings}: each "
                       f"decodes every prompt again ({len(texts)} x up to {prompts} prompts x up to "
                       f"{args.max_new_tokens} tokens); pass fewer, or raise --max-settings to run them all")


def _tokenizer(target: Path | None):
    if target is None:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(target))
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot load the tokenizer of {target} (--target): {str(e).splitlines()[0]}") from None


def _prompts(args: EvalOptions, max_prompt_len: int, vocab_size: int | None = None):

    if args.demo_prompts is not None:
        if not 1 <= args.demo_prompts <= 10_000:
            raise BadInput(f"--demo-prompts must be between 1 and 10000, got {args.demo_prompts}")
        candidates = demo_prompts(_tokenizer(args.target), args.demo_prompts * 4, args.demo_seed)
        limit = min(args.limit, args.demo_prompts)
    else:
        candidates = read_file(args.prompts, lambda: _tokenizer(args.target), max_prompt_len)
        limit = args.limit
    exclude = training_prompts(args.exclude) if args.exclude is not None else None
    chosen = select(candidates, limit, max_prompt_len, exclude)
    if vocab_size is not None:
        check_ids(chosen.prompts, vocab_size, f"--prompts {args.prompts}" if args.prompts else "--demo-prompts")
    if not chosen.prompts:
        raise BadInput(f"no prompts left to evaluate ({chosen.excluded} also in --exclude, "
                       f"{chosen.too_long} too long for the target's context)")
    return chosen


def _say(events: EventWriter, text: str) -> None:
    print(f"evaluate: {text}", flush=True)
    events.message(text)


def _arm_names(args: EvalOptions) -> list[str]:
    return ([str(args.drafter)] if args.drafter is not None else []) + (["the untrained baseline"] if args.baseline else [])


def _settings(args: EvalOptions):
    from .tree import Setting, parse_setting

    if args.configs is None:
        k = args.num_steps or 3
        return [Setting(k, 1, k + 1)]
    if args.num_steps is not None:
        raise BadInput("give --num-steps or --configs, not both (--configs 3,1,4 is --num-steps 3)")
    settings = []
    for text in _setting_texts(args.configs):
        try:
            s = parse_setting(text, MAX_STEPS, MAX_TOPK, MAX_DRAFT_TOKENS)
        except ValueError as e:
            raise BadInput(f"--configs {e}") from None
        if s in settings:
            raise BadInput(f"--configs {text!r} is given twice")
        settings.append(s)
    return settings


def _load_arms(args: EvalOptions, target, settings, device, dtype):
    from .drafter import load_exported, untrained
    from .sweep import arms_for

    trained = None
    arms, baseline = [], []
    if args.drafter is not None:
        trained = load_exported(args.drafter, args.target, target.capture, device, dtype)
        arms = arms_for("trained", trained, settings)
    if args.baseline:
        model = untrained(trained, args.target, device, dtype)
        baseline = arms_for("untrained", model, settings)
        trained = trained if trained is not None else model
    return (arms or baseline), (baseline if arms else []), trained


def _batch_size(args: EvalOptions, settings, device: str) -> int:
    """Prompts decoded in lockstep: --batch, else 16 on a GPU (where a forward of B prompts
    costs about what one does) and 1 on a CPU (where it costs B times as much). Trees and
    --no-kv-cache go one prompt at a time."""
    want = args.batch if args.batch is not None else (16 if device.startswith("cuda") else 1)
    if want > 1 and (args.no_kv_cache or any(s.topk > 1 for s in settings)):
        return 1
    return want


def _decode(args: EvalOptions, target, prompts: list, arms: list, baseline: list, refs, batch: int,
            events: EventWriter, progress: Progress) -> tuple[list[PromptFigures], int, int]:
    """Score every prompt, `batch` at a time: the per-prompt figures, the greedy reference's
    target forwards, and how many batched answers were decoded again one by one."""
    from . import sweep

    per_prompt: list[PromptFigures] = []
    greedy_fw = redecoded = 0
    n = len(prompts)
    began = time.monotonic()
    for start in range(0, n, batch):
        chunk = prompts[start:start + batch]
        progress.current = chunk[0].id if len(chunk) == 1 else f"{chunk[0].id} .. {chunk[-1].id}"
        if batch == 1:
            refs_used = [sweep.score_prompt(target, chunk[0], arms + baseline, args.max_new_tokens, refs)]
        else:
            refs_used, again = sweep.score_chunk(target, chunk, arms + baseline, args.max_new_tokens, refs)
            redecoded += again
        for p, ref in zip(chunk, refs_used):
            greedy_fw += ref.forwards
            per_prompt.append(PromptFigures(
                id=p.id, prompt_tokens=len(p.input_ids), new_tokens=len(ref.tokens),
                acceptance_length=arms[0].lengths[p.id],
                baseline_acceptance_length=baseline[0].lengths[p.id] if baseline else None))
        done = start + len(chunk)
        progress.scored, progress.current = done, None
        progress.so_far = (f"acceptance length so far "
                           f"{arms[0].summary(arms[0].setting.num_steps, done, greedy_fw).acceptance_length:.3f}")
        events.progress(done, n, unit="prompts")
        if start == 0 and done < n:
            took = time.monotonic() - began
            _say(events, f"the first {done} prompt(s) took {_duration(took)} for {len(arms + baseline)} setting(s) and "
                         f"the greedy reference: about {_duration(took * (n - done) / done)} more for the other "
                         f"{n - done}")
    return per_prompt, greedy_fw, redecoded


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.1f} s"


def run_local(args: EvalOptions, events: EventWriter, progress: Progress) -> LocalReport:
    cpu_threads.fit("evaluate", args.threads)
    import torch

    from . import estimate, sweep
    from .drafter import BASELINE_SEED
    from .verifier import Target

    settings = _settings(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    before = fingerprint.take(args.drafter) if args.drafter is not None else None
    target = Target(args.target, device, dtype, kv_cache=not args.no_kv_cache)
    arms, baseline, timed_model = _load_arms(args, target, settings, device, dtype)
    refs = None if args.references is None else References(args.references, target.fingerprint, args.dtype,
                                                           torch.device(device).type, target.vocab_size)
    deepest = max(s.num_steps for s in settings)
    chosen = _prompts(args, target.max_positions - args.max_new_tokens - deepest - 1, target.vocab_size)
    n = len(chosen.prompts)
    _say(events, f"{n} held-out prompts ({chosen.excluded} dropped as training prompts), "
                 f"settings {' '.join(s.label for s in settings)} (steps,topk,draft tokens), "
                 f"up to {args.max_new_tokens} new tokens each, scoring {' and '.join(_arm_names(args))}, "
                 f"KV cache {'off' if args.no_kv_cache else 'on'}: {n * len(settings) * (1 + bool(baseline))} "
                 f"speculative decodes beside {n} greedy ones (the time they take is estimated after the first prompt)")
    progress.total = n
    events.progress(0, n, unit="prompts")
    batch = _batch_size(args, settings, device)
    decode_started = time.monotonic()
    per_prompt, greedy_fw, redecoded = _decode(args, target, chosen.prompts, arms, baseline, refs, batch, events,
                                               progress)
    decode_seconds = time.monotonic() - decode_started
    times = estimate.forward_times(target, timed_model, chosen.prompts[0].input_ids, settings)
    target.forget()
    if before is not None:
        _refuse_if_changed(args, before)
    summaries = [a.summary(a.setting.num_steps, n, greedy_fw) for a in arms]
    s, k = summaries[0], settings[0].num_steps
    rows = sweep.table(settings, summaries, times)
    b = baseline[0].summary(k, n, greedy_fw) if baseline else None
    _tell(events, s, b, k, rows)
    baseline_label = f"untrained (train's initial drafter: seed {BASELINE_SEED}, lm_head from the target)"
    top = sweep.best(rows)
    _say_best(events, rows, top)
    return LocalReport(
        drafter=str(args.drafter) if args.drafter is not None else baseline_label, target=str(args.target),
        prompts_source=str(args.prompts) if args.prompts else f"demo seed {args.demo_seed}",
        excluded_as_training=chosen.excluded, too_long=chosen.too_long, max_new_tokens=args.max_new_tokens,
        output_equals_greedy=True, kv_cache=not args.no_kv_cache, target_positions_run=target.positions_run,
        greedy_references_kept=refs.hits if refs is not None else 0, batch=batch, redecoded_one_by_one=redecoded,
        decode_seconds=round(decode_seconds, 3), **s.record_fields(),
        drafter_files=fingerprint.summary(before) if before is not None else None,
        baseline=None if b is None else Baseline(
            drafter=baseline_label, **b.record_fields(),
            settings=sweep.table(settings, [a.summary(a.setting.num_steps, n, greedy_fw) for a in baseline], times)),
        forward_ms=ForwardTimes(target_by_tokens={str(d): round(t * 1e3, 3) for d, t in times["target"].items()},
                                drafter_by_rows={str(r): round(t * 1e3, 3) for r, t in times["drafter"].items()}),
        settings=rows, best=Best(setting=top.setting, flags=top.flags), per_prompt=tuple(per_prompt))


def _tell(events: EventWriter, s, b, k: int, rows: tuple[SettingRow, ...]) -> None:
    """The figures as log lines and metric events: the trained drafter's, the baseline's, the sweep's."""
    _say(events, describe(s))
    if b is not None:
        _say(events, f"trained {s.acceptance_length:.3f} vs untrained {b.acceptance_length:.3f} acceptance length "
                     f"at {k} draft steps (untrained per-position accept rate "
                     f"{' '.join(f'{r:.2f}' for r in b.accept_rate)})")
    emit_metrics(events, s, k)
    if b is not None:
        emit_metrics(events, b, k, prefix="baseline_")
    for j, row in enumerate(rows):
        events.metric("sweep_acceptance_length", row.acceptance_length, step=j, setting=row.setting)


def _refuse_if_changed(args: EvalOptions, before) -> None:
    """No report for a drafter folder that changed while it was scored (an export over it, say):
    its figures would be credited to weights that are no longer there."""
    changed = fingerprint.differences(before, fingerprint.take(args.drafter))
    if changed:
        raise BadInput(f"--drafter {args.drafter} changed while it was evaluated ({'; '.join(changed)}): the "
                       "figures belong to a drafter that is no longer there, so no report was written; "
                       "rerun the evaluation once the folder stays put (is an export running?)")


def _say_best(events: EventWriter, rows: tuple[SettingRow, ...], top: SettingRow) -> None:
    """The sweep's table (when there is more than one setting) and the setting to serve."""
    from . import sweep

    if len(rows) > 1:
        for line in sweep.lines(rows):
            _say(events, line)
    est = f"estimated ~{top.speedup_estimate:.2f}x wall clock here" if top.speedup_estimate else "no estimate"
    _say(events, f"best setting {top.setting} (acceptance length {top.acceptance_length:.3f}, {est}); "
                 "serve it with the flags on the last line")


def run_server(args: EvalOptions, events: EventWriter) -> ServerReport:

    chosen = _prompts(args, 1 << 30)
    n = len(chosen.prompts)
    _say(events, f"{n} held-out prompts to {args.server}/generate, up to {args.max_new_tokens} new tokens each")
    results = server.query(args.server, chosen.prompts, args.max_new_tokens, args.timeout, args.concurrency,
                           on_done=lambda done: events.progress(done, n, unit="prompts"), steps=args.num_steps)
    report = server.summarize(results, args.server, chosen.excluded)
    _say(events, f"mean spec_accept_length {report.mean_spec_accept_length:.3f} over {n} responses")
    events.metric("acceptance_length", report.mean_spec_accept_length)
    return report


def _stopped(progress: Progress, events: EventWriter | None) -> int:
    if progress.total:
        dropped = f"; prompt {progress.current} was dropped mid-way" if progress.current else ""
        so_far = f" ({progress.so_far})" if progress.so_far else ""
        text = (f"stopped by SIGTERM: {progress.scored} of {progress.total} prompts were scored{so_far}{dropped}; "
                "nothing is kept, no report was written: rerun to score")
    else:
        text = "stopped by SIGTERM before any prompt was scored; no report was written"
    print(f"evaluate: {text}", file=sys.stderr, flush=True)
    if events is not None:
        events.message(text, level="warning")
    return 143


def main(argv: list[str] | None = None) -> int:
    opts = EvalOptions(**vars(build_parser().parse_args(argv)))
    started = time.monotonic()
    progress = Progress()

    def body(term: SigtermGuard) -> int:
        _check_args(opts)
        events = None
        try:
            with EventWriter.from_env() as events:
                try:
                    report = run_server(opts, events) if opts.server else run_local(opts, events, progress)
                    report = replace(report, seconds=round(time.monotonic() - started, 2))
                    if opts.report is not None:
                        opts.report.parent.mkdir(parents=True, exist_ok=True)
                        # a stop lands before the write or after the report is counted, never between
                        with term.deferred():
                            write_report(opts.report, report)
                            progress.reported = True
                            events.artifact(str(opts.report), bytes=opts.report.stat().st_size)
                            print(f"evaluate: report -> {opts.report}", flush=True)
                    progress.reported = True
                    if isinstance(report, LocalReport):
                        print(report.best.flags, flush=True)  # the last line: the flags to paste
                except Terminated:
                    return 0 if progress.reported else _stopped(progress, events)
        except Terminated:
            return 0 if progress.reported else _stopped(progress, None)
        return 0

    with on_sigterm() as term:
        return run_program("evaluate", lambda: body(term))


if __name__ == "__main__":
    code = main()
    if code == 143:  # stopped: nothing left to tidy, and torch's teardown takes seconds of the stop's grace
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
