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

from collections.abc import Sequence

from pipeline.evaluate.evaluation import evaluate
from pipeline.evaluate.options import parse
from pipeline.evaluate.scoring import Progress
from pipeline.program_edge import Terminated, exit_with, on_sigterm, run_program


def main(argv: Sequence[str] | None = None) -> int:
    progress = Progress()

    def stop(signum: int) -> None:
        if not progress.reported:  # once the report is whole, the run ends as it would have: exit 0
            raise Terminated(progress.stop_note())

    with on_sigterm(stop) as term:
        def body() -> int:
            opts = parse(argv)
            opts.validate()
            return evaluate(opts, progress, term)

        return run_program("evaluate", body)


if __name__ == "__main__":
    exit_with(main())
