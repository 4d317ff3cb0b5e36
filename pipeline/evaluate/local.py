"""A local evaluation: the target and the drafters loaded with transformers and torch, every
prompt decoded greedily and speculatively at every setting, and the report that says how
it went. torch is imported only once the threads it gets are chosen."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pipeline import cpu_threads
from pipeline.evaluate import fingerprint
from pipeline.evaluate.errors import BadInput
from pipeline.evaluate.options import MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK, Options, setting_texts
from pipeline.evaluate.prompts import Prompt, held_out
from pipeline.evaluate.references import References
from pipeline.evaluate.report import Summary, describe
from pipeline.evaluate.scoring import Arm, Progress, emit_metrics, say
from pipeline.events import EventWriter
from pipeline.records.evaluate_report import Baseline, Best, ForwardTimes, LocalReport, PromptFigures, SettingRow

if TYPE_CHECKING:
    import torch

    from pipeline.drafter.model import Eagle3Drafter
    from pipeline.evaluate.tree import Setting
    from pipeline.evaluate.verifier import Target


def settings_of(opts: Options) -> list[Setting]:
    """--configs' settings, else the chain of --num-steps (3 when neither is given)."""
    from pipeline.evaluate.tree import Setting, parse_setting

    if opts.configs is None:
        k = opts.num_steps or 3
        return [Setting(k, 1, k + 1)]
    settings: list[Setting] = []
    for text in setting_texts(opts.configs):
        try:
            s = parse_setting(text, MAX_STEPS, MAX_TOPK, MAX_DRAFT_TOKENS)
        except ValueError as e:
            raise BadInput(f"--configs {e}") from None
        if s in settings:
            raise BadInput(f"--configs {text!r} is given twice")
        settings.append(s)
    return settings


def _arm_names(opts: Options) -> list[str]:
    return ([str(opts.drafter)] if opts.drafter is not None else []) + (["the untrained baseline"] if opts.baseline else [])


def _load_arms(opts: Options, target: Target, settings: list[Setting], device: str,
               dtype: torch.dtype) -> tuple[list[Arm], list[Arm], Eagle3Drafter]:
    """The arms scored (the trained drafter's, else the baseline's), the baseline's beside
    them (none when they are the baseline), and the drafter whose forwards are timed."""
    from pipeline.evaluate.drafter import load_exported, untrained
    from pipeline.evaluate.sweep import arms_for

    assert opts.target is not None  # validate(): a local evaluation has one
    trained = None
    arms: list[Arm] = []
    baseline: list[Arm] = []
    if opts.drafter is not None:
        trained = load_exported(opts.drafter, opts.target, target.capture, device, dtype)
        arms = arms_for("trained", trained, settings)
    if opts.baseline:
        model = untrained(trained, opts.target, device, dtype)
        baseline = arms_for("untrained", model, settings)
        trained = trained if trained is not None else model
    assert trained is not None  # validate(): --drafter, --baseline or both
    return (arms or baseline), (baseline if arms else []), trained


def _batch_size(opts: Options, settings: list[Setting], device: str) -> int:
    """Prompts decoded in lockstep: --batch, else 16 on a GPU (where a forward of B prompts
    costs about what one does) and 1 on a CPU (where it costs B times as much). Trees and
    --no-kv-cache go one prompt at a time."""
    want = opts.batch if opts.batch is not None else (16 if device.startswith("cuda") else 1)
    if want > 1 and (opts.no_kv_cache or any(s.topk > 1 for s in settings)):
        return 1
    return want


def _decode(opts: Options, target: Target, prompts: list[Prompt], arms: list[Arm], baseline: list[Arm],
            refs: References | None, batch: int, events: EventWriter,
            progress: Progress) -> tuple[list[PromptFigures], int, int]:
    """Score every prompt, `batch` at a time: the per-prompt figures, the greedy reference's
    target forwards, and how many batched answers were decoded again one by one."""
    from pipeline.evaluate import sweep

    per_prompt: list[PromptFigures] = []
    greedy_fw = redecoded = 0
    n = len(prompts)
    began = time.monotonic()
    for start in range(0, n, batch):
        chunk = prompts[start:start + batch]
        progress.current = chunk[0].id if len(chunk) == 1 else f"{chunk[0].id} .. {chunk[-1].id}"
        if batch == 1:
            refs_used = [sweep.score_prompt(target, chunk[0], arms + baseline, opts.max_new_tokens, refs)]
        else:
            refs_used, again = sweep.score_chunk(target, chunk, arms + baseline, opts.max_new_tokens, refs)
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
            say(events, f"the first {done} prompt(s) took {_duration(took)} for {len(arms + baseline)} setting(s) and "
                        f"the greedy reference: about {_duration(took * (n - done) / done)} more for the other "
                        f"{n - done}")
    return per_prompt, greedy_fw, redecoded


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.1f} s"


def run_local(opts: Options, events: EventWriter, progress: Progress) -> LocalReport:
    cpu_threads.fit("evaluate", opts.threads)
    import torch

    from pipeline.evaluate import speedup_model, sweep
    from pipeline.evaluate.drafter import BASELINE_SEED
    from pipeline.evaluate.verifier import Target

    assert opts.target is not None  # validate(): a local evaluation has one
    settings = settings_of(opts)
    device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[opts.dtype]
    before = fingerprint.take(opts.drafter) if opts.drafter is not None else None
    target = Target(opts.target, device, dtype, kv_cache=not opts.no_kv_cache)
    arms, baseline, timed_model = _load_arms(opts, target, settings, device, dtype)
    refs = None if opts.references is None else References(opts.references, target.fingerprint, opts.dtype,
                                                           torch.device(device).type, target.vocab_size)
    deepest = max(s.num_steps for s in settings)
    chosen = held_out(opts, target.max_positions - opts.max_new_tokens - deepest - 1, target.vocab_size)
    n = len(chosen.prompts)
    say(events, f"{n} held-out prompts ({chosen.excluded} dropped as training prompts), "
                f"settings {' '.join(s.label for s in settings)} (steps,topk,draft tokens), "
                f"up to {opts.max_new_tokens} new tokens each, scoring {' and '.join(_arm_names(opts))}, "
                f"KV cache {'off' if opts.no_kv_cache else 'on'}: {n * len(settings) * (1 + bool(baseline))} "
                f"speculative decodes beside {n} greedy ones (the time they take is estimated after the first prompt)")
    progress.total = n
    events.progress(0, n, unit="prompts")
    batch = _batch_size(opts, settings, device)
    decode_started = time.monotonic()
    per_prompt, greedy_fw, redecoded = _decode(opts, target, chosen.prompts, arms, baseline, refs, batch, events,
                                               progress)
    decode_seconds = time.monotonic() - decode_started
    times = speedup_model.forward_times(target, timed_model, chosen.prompts[0].input_ids, settings)
    target.forget()
    if before is not None:
        _refuse_if_changed(opts, before)
    summaries = [a.summary(a.setting.num_steps, n, greedy_fw) for a in arms]
    s, k = summaries[0], settings[0].num_steps
    rows = sweep.table(settings, summaries, times)
    b = baseline[0].summary(k, n, greedy_fw) if baseline else None
    _tell(events, s, b, k, rows)
    baseline_label = f"untrained (train's initial drafter: seed {BASELINE_SEED}, lm_head from the target)"
    top = sweep.best(rows)
    _say_best(events, rows, top)
    return LocalReport(
        drafter=str(opts.drafter) if opts.drafter is not None else baseline_label, target=str(opts.target),
        prompts_source=str(opts.prompts) if opts.prompts else f"demo seed {opts.demo_seed}",
        excluded_as_training=chosen.excluded, too_long=chosen.too_long, max_new_tokens=opts.max_new_tokens,
        output_equals_greedy=True, kv_cache=not opts.no_kv_cache, target_positions_run=target.positions_run,
        greedy_references_kept=refs.hits if refs is not None else 0, batch=batch, redecoded_one_by_one=redecoded,
        decode_seconds=round(decode_seconds, 3), **s.record_fields(),
        drafter_files=fingerprint.summary(before) if before is not None else None,
        baseline=None if b is None else Baseline(
            drafter=baseline_label, **b.record_fields(),
            settings=sweep.table(settings, [a.summary(a.setting.num_steps, n, greedy_fw) for a in baseline], times)),
        forward_ms=ForwardTimes(target_by_tokens={str(d): round(t * 1e3, 3) for d, t in times["target"].items()},
                                drafter_by_rows={str(r): round(t * 1e3, 3) for r, t in times["drafter"].items()}),
        settings=rows, best=Best(setting=top.setting, flags=top.flags), per_prompt=tuple(per_prompt))


def _tell(events: EventWriter, s: Summary, b: Summary | None, k: int, rows: tuple[SettingRow, ...]) -> None:
    """The figures as log lines and metric events: the trained drafter's, the baseline's, the sweep's."""
    say(events, describe(s))
    if b is not None:
        say(events, f"trained {s.acceptance_length:.3f} vs untrained {b.acceptance_length:.3f} acceptance length "
                    f"at {k} draft steps (untrained per-position accept rate "
                    f"{' '.join(f'{r:.2f}' for r in b.accept_rate)})")
    emit_metrics(events, s, k)
    if b is not None:
        emit_metrics(events, b, k, prefix="baseline_")
    for j, row in enumerate(rows):
        events.metric("sweep_acceptance_length", row.acceptance_length, step=j, setting=row.setting)


def _refuse_if_changed(opts: Options, before: dict[str, tuple[int, str]]) -> None:
    """No report for a drafter folder that changed while it was scored (an export over it, say):
    its figures would be credited to weights that are no longer there."""
    assert opts.drafter is not None
    changed = fingerprint.differences(before, fingerprint.take(opts.drafter))
    if changed:
        raise BadInput(f"--drafter {opts.drafter} changed while it was evaluated ({'; '.join(changed)}): the "
                       "figures belong to a drafter that is no longer there, so no report was written; "
                       "rerun the evaluation once the folder stays put (is an export running?)")


def _say_best(events: EventWriter, rows: tuple[SettingRow, ...], top: SettingRow) -> None:
    """The sweep's table (when there is more than one setting) and the setting to serve."""
    from pipeline.evaluate import sweep

    if len(rows) > 1:
        for line in sweep.lines(rows):
            say(events, line)
    est = f"estimated ~{top.speedup_estimate:.2f}x wall clock here" if top.speedup_estimate else "no estimate"
    say(events, f"best setting {top.setting} (acceptance length {top.acceptance_length:.3f}, {est}); "
                "serve it with the flags on the last line")
