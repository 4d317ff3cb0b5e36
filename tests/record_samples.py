"""Records as their writers make them, with fixed figures, for the tests of their readers (the
records' own round trips, the console's acceptance bars, the charts project)."""

from __future__ import annotations

from pipeline.records.evaluate_report import (
    Best,
    FileFingerprint,
    ForwardTimes,
    LocalReport,
    PromptFigures,
    ServerPrompt,
    ServerReport,
    SettingRow,
    TargetForwards,
)
from pipeline.records.extract_estimate import ExtractEstimate
from pipeline.records.merge_stats import MergeStats, Policy, SourceStats
from pipeline.records.regenerate_estimate import RegenerateEstimate
from pipeline.records.regenerate_stats import RegenerateStats
from pipeline.records.source_reading import ArrayCut, DuplicateIds, PolicyCount, SourceReading
from pipeline.records.synthesis_estimate import SynthesisEstimate
from pipeline.records.synthesis_stats import SynthesisStats
from pipeline.records.train_estimate import TrainEstimate
from pipeline.records.train_summary import DraftVocab, StepFigures, TrainSummary, Validation

CHART_SETTINGS = ((3, 1, 4, 2.412, (0.78, 0.55, 0.31), 1.62), (5, 1, 6, 2.71, (0.78, 0.55, 0.31, 0.22, 0.15), 1.71),
                  (5, 4, 8, 3.05, (0.86, 0.64, 0.42, 0.3, 0.21), 1.93),
                  (7, 4, 8, 3.11, (0.86, 0.64, 0.42, 0.3, 0.21, 0.14, 0.1), 1.88),
                  (7, 8, 32, 3.32, (0.9, 0.7, 0.5, 0.36, 0.25, 0.17, 0.12), 1.41))


def flags(steps: int, topk: int, draft: int) -> str:
    return (f"--speculative-algorithm EAGLE3 --speculative-num-steps {steps} --speculative-eagle-topk {topk} "
            f"--speculative-num-draft-tokens {draft}")


def figures(steps: int, length: float, rates: tuple[float, ...], prompts: int = 16) -> dict:
    rounds = 318
    return dict(num_steps=steps, prompts=prompts, tokens=round(rounds * length), verify_rounds=rounds,
                acceptance_length=length, accept_rate=rates,
                accept_prob=tuple(round(r ** (i + 1), 4) for i, r in enumerate(rates)),
                target_forwards=TargetForwards(speculative=rounds, greedy=round(rounds * length)),
                speedup_forwards=length)


def setting_row(steps: int, topk: int, draft: int, length: float, rates: tuple[float, ...],
                speedup: float | None) -> SettingRow:
    return SettingRow(setting=f"{steps},{topk},{draft}", topk=topk, num_draft_tokens=draft,
                      flags=flags(steps, topk, draft), **figures(steps, length, rates),
                      target_forwards_saved=round(318 * length) - 318, speedup_estimate=speedup)


def local_report(settings=CHART_SETTINGS, **changes) -> LocalReport:
    """A sweep (the charts project's five settings by default); its own figures are the first
    setting's, its best the fastest, as pipeline.evaluate writes them."""
    rows = tuple(setting_row(*s) for s in settings)
    top = max(rows, key=lambda r: (r.speedup_estimate or 0.0, r.acceptance_length))
    first = rows[0]
    fields = dict(
        drafter="out/drafter", target="models/target", prompts_source="data/heldout.jsonl", excluded_as_training=2,
        too_long=0, max_new_tokens=64, output_equals_greedy=True, kv_cache=True, target_positions_run=9001,
        greedy_references_kept=0, batch=1, redecoded_one_by_one=0, decode_seconds=12.5,
        **figures(first.num_steps, first.acceptance_length, first.accept_rate),
        drafter_files={"model.safetensors": FileFingerprint(bytes=1024, sha256="ab" * 32)},
        forward_ms=ForwardTimes(target_by_tokens={"1": 3.5, "4": 3.9}, drafter_by_rows={"1": 0.4}),
        settings=rows, best=Best(setting=top.setting, flags=top.flags),
        per_prompt=(PromptFigures(id="p0", prompt_tokens=40, new_tokens=64, acceptance_length=2.5),
                    PromptFigures(id="p1", prompt_tokens=31, new_tokens=1, acceptance_length=None)),
        seconds=30.25)
    return LocalReport(**{**fields, **changes})


def server_report() -> ServerReport:
    return ServerReport(server="http://127.0.0.1:30000", excluded_as_training=0, prompts=2,
                        mean_spec_accept_length=2.25, completion_tokens=128, verify_ct=57,
                        token_weighted_accept_length=2.2456,
                        per_prompt=(ServerPrompt(id="p0", spec_accept_length=2.5, spec_verify_ct=26,
                                                 completion_tokens=64),
                                    ServerPrompt(id="p1", spec_accept_length=2.0, spec_verify_ct=31,
                                                 completion_tokens=64)),
                        seconds=4.5)


def source_reading(records: int, files: tuple[str, ...] = ("data/chats.jsonl",), skipped: int = 0) -> SourceReading:
    return SourceReading(
        files=files, records=records, usable=records - skipped, invalid=skipped,
        invalid_share=round(skipped / records, 6) if records else 0.0,
        skipped={"no_assistant": skipped} if skipped else {},
        assistant_first=PolicyCount(records=0, action="keep"),
        duplicate_id=DuplicateIds(records=0, action="first usable kept", kept_after_a_skipped_one=0),
        same_role=PolicyCount(records=0, action="join"), lines_too_long=0,
        cut=(ArrayCut(file=files[0], byte=1234, line=7),) if skipped else (),
        examples={"no_assistant": (f"{files[0]}:3 (id c3)",)} if skipped else {},
        first_problem={"no_assistant": "no assistant turn"} if skipped else {},
        role_map={"human": "user", "gpt": "assistant"})


def merge_stats(records: list[dict], sha256: str, source: str = "tiny", max_len: int | None = None) -> MergeStats:
    """The stats merge writes for `records` (merged samples: input_ids, loss_mask) from one source."""
    tokens = sum(len(r["input_ids"]) for r in records)
    loss = sum(sum(r["loss_mask"]) for r in records)
    longest = max((len(r["input_ids"]) for r in records), default=0)
    counts = dict(records=len(records), tokens=tokens, loss_tokens=loss)
    return MergeStats(
        **counts, max_len=max_len if max_len is not None else longest, on_long="truncate", seed=0,
        tokenizer="tiny", mask_method="markers", char_bound=1 << 20, line_bound=1 << 24,
        sources={source: SourceStats(shape="messages", shapes={"messages": len(records)}, **counts,
                                     read=len(records), dropped_too_long=0, dropped_empty_mask=0, truncated=0,
                                     over_char_bound=0, lines_too_long=0, skipped=0,
                                     input=source_reading(len(records)))},
        skipped=0, policy=Policy(strict=False, max_invalid=0.05, role_map={"human": "user"},
                                 on_assistant_first="drop", same_role="join"),
        dropped=0, truncated=0, dataset_sha256=sha256)


def regenerate_stats() -> RegenerateStats:
    return RegenerateStats(
        status="done", records_in=41, regenerable=40, wanted=40, records_out=39, resumed=10,
        skipped={"assistant_first": 1}, failures={"http_5xx": 1}, failure_examples={"http_5xx": ("chat-7: HTTP 503",)},
        answers=52, generated_tokens=4096, loops_cut=2, loop_tokens_cut=300, seconds=61.5,
        sources={"chats": source_reading(41, skipped=1)},
        options={"backend": "server", "max_new_tokens": 2048, "temperature": 0.0, "servers": ["http://a:30000"],
                 "role_map": {"human": "user"}, "limit": None, "trim_loops": True})


def train_summary(**changes) -> TrainSummary:
    history = tuple(StepFigures(step=s, loss=round(6.0 / s, 4), acc=(0.5, 0.3, 0.2)) for s in (10, 20, 30))
    fields = dict(
        steps=30, total_steps=40, resumed_from=20, stopped=True, loss=0.2, acc=(0.5, 0.3, 0.2), tokens=123456,
        seconds=12.5, tokens_this_session=40000, tokens_per_s=3200.0, checkpoint="run/checkpoints/step_00000030",
        draft_vocab_size=32000, draft_vocab_coverage=0.97,
        draft_vocab=DraftVocab(source="the store's 300 training samples", coverage_chosen_on=0.99,
                               held_out_coverage=0.97, held_out_distinct_tokens=900, held_out_distinct_missing=12),
        val=Validation(samples=6, tokens=1500, loss=0.4, acc=(0.4, 0.25, 0.1), history=history[1:]),
        world_size=1, device="cpu", history=history, source="store", peak_gpu_bytes=None)
    return TrainSummary(**{**fields, **changes})


def train_estimate() -> TrainEstimate:
    parts = {"drafter_and_optimizer": 4_000_000_000, "target_head": 60_000_000, "activations": 9_000_000_000,
             "target_weights": 270_000_000, "target_forward": 900_000_000}
    return TrainEstimate(gpu_bytes=int(sum(parts.values()) * 1.2), parts=parts, online=True, batch_tokens=16384,
                         max_len=2048, draft_vocab=32000, ttt_length=7, margin=1.2)


def extract_estimate() -> ExtractEstimate:
    return ExtractEstimate(bytes=5_000_000, tokens=1000, records=10, limit=None, hidden=576, num_layers=30,
                           dtype="bfloat16", store_dtype="bfloat16", dtype_bytes=2, hidden_state_bytes=4_608_000,
                           scale_bytes=0, overhead_bytes=392_000, per_token_bytes=4617, per_record_overhead_bytes=4700,
                           formula="tokens*4*hidden*dtype_bytes + tokens*9 + records*(header+4096+256) + 4096")


def regenerate_estimate() -> RegenerateEstimate:
    return RegenerateEstimate(records=30, answers=45, max_new_tokens=64, kept_bytes=9000, answer_bytes=24480,
                              bytes=35400, formula="kept text + answers*(max_new_tokens*8+32) + records*64")


def synthesis_stats() -> SynthesisStats:
    return SynthesisStats(
        status="stopped", wanted=24, max_asked=48, records_out=10, resumed=3, asked=14, surplus=0,
        dropped={"duplicate": 2, "too_short": 1}, ended_early={"unfinished": 1},
        examples={"duplicate": ("synth-0-14: same as synth-0-13's",), "unfinished": ("synth-0-15 (turn 2): cut",)},
        questions=16, question_tokens=200, answer_tokens=300, generated_tokens=500, answers=11, loops_cut=0,
        loop_tokens_cut=0, seconds=42.0, options={"synthesize": 24, "seed": 0, "turns": 2, "system_prompts": None})


def synthesis_estimate() -> SynthesisEstimate:
    return SynthesisEstimate(records=24, turns=2, bytes=24 * (2 * ((256 + 2048) * 8 + 64) + 64),
                             formula="records * (turns * ((max_question_tokens + max_new_tokens) * 8 + 64) + "
                                     "longest system prompt + 64)")
