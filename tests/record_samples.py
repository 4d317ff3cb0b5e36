"""Records as their writers make them, with fixed figures, for the tests of their readers (the
records' own round trips, the console's acceptance bars, the charts project)."""

from __future__ import annotations

from pipeline.records.evaluate_report import (Best, FileFingerprint, ForwardTimes, LocalReport, PromptFigures,
                                              ServerPrompt, ServerReport, SettingRow, TargetForwards)

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
