"""`python -m pipeline.evaluate`: how many tokens an exported drafter saves its target.

    python -m pipeline.evaluate --drafter DRAFTER --target TARGET (--prompts FILE | --demo-prompts N)
        [--exclude TRAIN.jsonl] [--num-steps 3] [--limit 32] [--max-new-tokens 64] [--report OUT.json]
    python -m pipeline.evaluate --server URL (--prompts FILE | --demo-prompts N) [--target TARGET] [...]

Local mode loads the EXPORTED folder (what SGLang would serve) and the target with
transformers, and decodes each held-out prompt twice: plain greedy, and speculatively
(chains of --num-steps drafts, greedy verification in one target forward). It reports the
mean acceptance length (tokens per verify forward: accepted drafts + 1), the acceptance
rate per draft position, and the speedup in target forwards. Speculative output must
equal greedy output token for token; when it does not, nothing is reported (exit 3).

--server URL instead sends the prompts to a running SGLang server's /generate and reports
the mean `spec_accept_length` of the responses' meta_info.

Prompts: --prompts takes chat records (any shape merge reads; the prompt is everything up
to the first assistant turn) or merged records (the tokens before the first loss-masked
one). --demo-prompts N generates N chats with the demo's generator at --demo-seed (default
1; the demo's training data uses seed 0). --exclude drops prompts that open a record of
the given merged training set, and reports how many it dropped.

Results go to stdout, to --report as JSON, and as metric events (acceptance_length,
accept_rate_<i>, speedup_forwards) to $EAGLE3_EVENTS.

Exit codes: 0 reported, 2 bad input (missing or mismatched drafter, target, prompts or
server), 3 speculative output differed from greedy output (a bug; nothing reported),
1 anything else.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pipeline.atomicfile import write_json_atomic
from pipeline.events import EventWriter
from pipeline.program_edge import run_program

from .errors import BadInput, EvalError, Mismatch

PROG = "python -m pipeline.evaluate"
MAX_STEPS = 16
MAX_NEW = 4096


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Measure an exported EAGLE-3 drafter's acceptance length.")
    p.add_argument("--drafter", type=Path, help="folder written by pipeline.export")
    p.add_argument("--target", type=Path, help="target model folder (with --server: only its tokenizer is read)")
    p.add_argument("--server", metavar="URL", help="query a running SGLang server instead (e.g. http://127.0.0.1:30000)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", type=Path, help="held-out prompts: chat records or merged records (JSONL)")
    src.add_argument("--demo-prompts", type=int, metavar="N", help="N chats from the demo's generator at --demo-seed")
    p.add_argument("--demo-seed", type=int, default=1, help="seed for --demo-prompts (default 1; the demo trains on 0)")
    p.add_argument("--exclude", type=Path, metavar="TRAIN.jsonl", help="merged training set whose prompts are dropped")
    p.add_argument("--num-steps", type=int, default=3, help=f"drafts per round, 1..{MAX_STEPS} (default 3)")
    p.add_argument("--limit", type=int, default=32, help="prompts evaluated (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=64, help=f"tokens generated per prompt, 1..{MAX_NEW} (default 64)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="compute dtype (default fp32)")
    p.add_argument("--report", type=Path, help="write the figures here as JSON")
    p.add_argument("--concurrency", type=int, default=4, help="--server: requests in flight, 1..64 (default 4)")
    p.add_argument("--timeout", type=float, default=300.0, help="--server: seconds per request (default 300)")
    return p


def _check_args(args: argparse.Namespace) -> None:
    if args.prompts is None and args.demo_prompts is None:
        raise BadInput(f"give --prompts FILE or --demo-prompts N; see {PROG} --help")
    if args.server is None and (args.drafter is None or args.target is None):
        raise BadInput("local evaluation needs --drafter and --target (or pass --server URL)")
    if not 1 <= args.num_steps <= MAX_STEPS:
        raise BadInput(f"--num-steps must be between 1 and {MAX_STEPS}, got {args.num_steps}")
    if not 1 <= args.max_new_tokens <= MAX_NEW:
        raise BadInput(f"--max-new-tokens must be between 1 and {MAX_NEW}, got {args.max_new_tokens}")
    if args.demo_prompts is not None and args.target is None:
        raise BadInput("--demo-prompts needs --target (its tokenizer renders the chats)")
    if not 1 <= args.concurrency <= 64:
        raise BadInput(f"--concurrency must be between 1 and 64, got {args.concurrency}")
    if not 0 < args.timeout <= 86400:
        raise BadInput(f"--timeout must be between 0 and 86400 seconds, got {args.timeout}")


def _tokenizer(target: Path | None):
    if target is None:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(target))
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot load the tokenizer of {target} (--target): {str(e).splitlines()[0]}") from None


def _prompts(args: argparse.Namespace, max_prompt_len: int):
    from .prompts import demo_prompts, read_file, select, training_prompts

    if args.demo_prompts is not None:
        if not 1 <= args.demo_prompts <= 10_000:
            raise BadInput(f"--demo-prompts must be between 1 and 10000, got {args.demo_prompts}")
        candidates = demo_prompts(_tokenizer(args.target), args.demo_prompts * 4, args.demo_seed)
        limit = min(args.limit, args.demo_prompts)
    else:
        candidates = read_file(args.prompts, lambda: _tokenizer(args.target))
        limit = args.limit
    exclude = training_prompts(args.exclude) if args.exclude is not None else None
    chosen = select(candidates, limit, max_prompt_len, exclude)
    if not chosen.prompts:
        raise BadInput(f"no prompts left to evaluate ({chosen.excluded} also in --exclude, "
                       f"{chosen.too_long} too long for the target's context)")
    return chosen


def _say(events: EventWriter, text: str) -> None:
    print(f"evaluate: {text}", flush=True)
    events.message(text)


def run_local(args: argparse.Namespace, events: EventWriter) -> dict:
    import torch

    from .drafter import ChainDrafter, load_exported
    from .report import describe, summarize
    from .speculative import greedy, speculate
    from .target import Target

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    target = Target(args.target, device, dtype)
    drafter = ChainDrafter(load_exported(args.drafter, args.target, target.capture, device, dtype))
    chosen = _prompts(args, target.max_positions - args.max_new_tokens - args.num_steps - 1)
    k = args.num_steps
    _say(events, f"{len(chosen.prompts)} held-out prompts ({chosen.excluded} dropped as training prompts), "
                 f"{k} draft steps, up to {args.max_new_tokens} new tokens each")
    accepted: list[int] = []
    per_prompt = []
    tokens = spec_fw = greedy_fw = 0
    for i, p in enumerate(chosen.prompts, 1):
        ref = greedy(target, p.input_ids, args.max_new_tokens)
        got = speculate(target, drafter, p.input_ids, args.max_new_tokens, k)
        if got.tokens != ref.tokens:
            at = next((j for j, (a, b) in enumerate(zip(got.tokens, ref.tokens)) if a != b),
                      min(len(got.tokens), len(ref.tokens)))
            raise Mismatch(f"prompt {p.id}: speculative output differs from greedy at new token {at} "
                           f"({got.tokens[at:at + 3]} vs {ref.tokens[at:at + 3]}); refusing to report acceptance")
        accepted += got.accepted
        tokens += len(got.tokens)
        spec_fw += got.forwards
        greedy_fw += ref.forwards
        rounds = len(got.accepted)
        per_prompt.append({"id": p.id, "prompt_tokens": len(p.input_ids), "new_tokens": len(got.tokens),
                           "verify_rounds": rounds,
                           "acceptance_length": round((sum(got.accepted) + rounds) / rounds, 3) if rounds else None})
        events.progress(i, len(chosen.prompts), unit="prompts")
    s = summarize(k, accepted, tokens, len(chosen.prompts), spec_fw, greedy_fw)
    _say(events, describe(s))
    events.metric("acceptance_length", round(s.acceptance_length, 4), step=k)
    for i, r in enumerate(s.accept_rate, 1):
        events.metric(f"accept_rate_{i}", round(r, 4), step=k)
    events.metric("speedup_forwards", round(s.speedup_forwards, 4), step=k)
    return {"mode": "local", "drafter": str(args.drafter), "target": str(args.target),
            "prompts_source": str(args.prompts) if args.prompts else f"demo seed {args.demo_seed}",
            "excluded_as_training": chosen.excluded, "too_long": chosen.too_long,
            "max_new_tokens": args.max_new_tokens, "output_equals_greedy": True,
            **s.to_json(), "per_prompt": per_prompt}


def run_server(args: argparse.Namespace, events: EventWriter) -> dict:
    from . import server

    chosen = _prompts(args, 1 << 30)
    n = len(chosen.prompts)
    _say(events, f"{n} held-out prompts to {args.server}/generate, up to {args.max_new_tokens} new tokens each")
    results = server.query(args.server, chosen.prompts, args.max_new_tokens, args.timeout, args.concurrency,
                           on_done=lambda done: events.progress(done, n, unit="prompts"))
    s = server.summarize(results)
    _say(events, f"mean spec_accept_length {s['mean_spec_accept_length']:.3f} over {n} responses")
    events.metric("acceptance_length", s["mean_spec_accept_length"])
    return {"mode": "server", "server": args.server, "excluded_as_training": chosen.excluded, **s,
            "per_prompt": [{"id": r.id, "spec_accept_length": r.accept_length, "spec_verify_ct": r.verify_ct,
                            "completion_tokens": r.completion_tokens} for r in results]}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()

    def body() -> int:
        _check_args(args)
        with EventWriter.from_env() as events:
            report = run_server(args, events) if args.server else run_local(args, events)
            report["seconds"] = round(time.monotonic() - started, 2)
            if args.report is not None:
                args.report.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(args.report, report)
                events.artifact(str(args.report), bytes=args.report.stat().st_size)
                print(f"evaluate: report -> {args.report}")
        return 0

    return run_program("evaluate", body, EvalError)

if __name__ == "__main__":
    sys.exit(main())
