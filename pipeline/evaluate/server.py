"""Acceptance measured by a running SGLang server (`--server URL`).

Each prompt goes to `POST URL/generate` as token ids with greedy sampling; SGLang puts
`spec_accept_length` (completion tokens / verify forwards, the first token included),
`spec_verify_ct` and `completion_tokens` in the response's `meta_info` when it serves
with a speculative algorithm. A response without them means the server is not drafting,
which is reported as such rather than as an acceptance of 1. The figures of a response are
checked against each other (`_agree`): a server that reports acceptance length 50 for 8
tokens in 4 verify forwards gets no report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pipeline.evaluate.errors import BadInput, EvalError
from pipeline.evaluate.options import Options
from pipeline.evaluate.prompts import Prompt, held_out
from pipeline.evaluate.scoring import say
from pipeline.events import EventWriter
from pipeline.http_client import TOO_LARGE, HttpFailure, post_json
from pipeline.records.evaluate_report import ServerPrompt, ServerReport

MAX_RESPONSE_BYTES = 64 << 20
MAX_ACCEPT_LENGTH = 1024  # SGLang verifies at most --speculative-num-draft-tokens per forward; far below this
MAX_COUNT = 1 << 40


@dataclass(frozen=True)
class ServerResult:
    id: str
    accept_length: float
    verify_ct: int | None
    completion_tokens: int | None


def _post(url: str, body: dict, timeout: float) -> dict:
    """One request through pipeline.http_client: `timeout` bounds the whole request, not each read."""
    try:
        resp = post_json(url, body, timeout, MAX_RESPONSE_BYTES)
    except HttpFailure as f:
        if f.kind == TOO_LARGE:
            raise EvalError(f.detail) from None
        raise BadInput(f"{url}: cannot reach the server ({f.detail}); is it running (--server)?") from None
    if resp.status != 200:
        detail = resp.body[:300].decode(errors="replace").strip()
        raise EvalError(f"{url}: HTTP {resp.status}: {detail}")
    try:
        return json.loads(resp.body)
    except (ValueError, RecursionError):
        raise EvalError(f"{url}: response is not JSON: {resp.body[:120]!r}") from None


def _one(url: str, prompt: Prompt, max_new: int, timeout: float, steps: int | None) -> ServerResult:
    body = {"input_ids": prompt.input_ids,
            "sampling_params": {"max_new_tokens": max_new, "temperature": 0.0}}
    resp = _post(url, body, timeout)
    if isinstance(resp, list) and len(resp) == 1:
        resp = resp[0]
    meta = resp.get("meta_info") if isinstance(resp, dict) else None
    if not isinstance(meta, dict):
        raise EvalError(f"{url}: response for prompt {prompt.id} has no meta_info; is this an SGLang /generate?")
    length = meta.get("spec_accept_length")
    if not isinstance(length, (int, float)) or isinstance(length, bool):
        raise BadInput(
            f"{url}: meta_info of prompt {prompt.id} has no spec_accept_length (keys: {', '.join(sorted(meta))}); "
            "start the server with --speculative-algorithm EAGLE3 and the exported drafter"
        )
    if not 1.0 <= float(length) <= MAX_ACCEPT_LENGTH:  # NaN fails both comparisons
        raise BadInput(f"{url}: meta_info of prompt {prompt.id} gives spec_accept_length {length!r}, which no "
                        f"decoding can produce (tokens per verify forward lie between 1 and {MAX_ACCEPT_LENGTH}); "
                        "the server's figures cannot be trusted, so none is reported")
    verify = _count(meta, "spec_verify_ct", url, prompt)
    done = _count(meta, "completion_tokens", url, prompt)
    proposed = _count(meta, "spec_num_proposed_drafts", url, prompt)
    _agree(f"{url}: prompt {prompt.id}", float(length), verify, done, proposed, max_new, steps)
    return ServerResult(prompt.id, float(length), verify, done)


def _agree(where: str, length: float, verify: int | None, done: int | None, proposed: int | None, max_new: int,
           steps: int | None) -> None:
    """One response's figures against each other and against what was asked: SGLang's
    spec_accept_length is completion_tokens / spec_verify_ct; a verify forward commits at
    least 1 token and at most steps + 1 (--num-steps, the server's --speculative-num-steps)
    or its draft tokens (spec_num_proposed_drafts / spec_verify_ct + 1); the prefill commits
    the first token; no answer is longer than --max-new-tokens."""
    distrust = "; the server's figures cannot be trusted, so none is reported"
    if done is not None and done > max_new:
        raise BadInput(f"{where}: completion_tokens {done}, more than the {max_new} asked (--max-new-tokens){distrust}")
    if verify is not None and done is not None:
        if not 0 < verify <= done:
            raise BadInput(f"{where}: spec_verify_ct {verify} for {done} completion tokens; every verify forward "
                           f"commits at least one token{distrust}")
        if not math.isclose(length, done / verify, rel_tol=1e-6):
            raise BadInput(f"{where}: spec_accept_length {length:g}, but completion_tokens {done} in spec_verify_ct "
                           f"{verify} is {done / verify:.4g} per verify forward (the ratio SGLang reports){distrust}")
    widths = []
    if steps:
        widths.append((steps + 1, f"--num-steps {steps} + 1"))
    if proposed is not None and verify:
        if proposed % verify:
            raise BadInput(f"{where}: spec_num_proposed_drafts {proposed} is not a whole number of drafts for each of "
                           f"its {verify} verify forwards{distrust}")
        widths.append((proposed // verify + 1, f"the {proposed // verify + 1} draft tokens of each verify forward"))
    for width, why in widths:
        bound = width + 1 / verify if verify else width + 1  # the prefill's first token is in completion_tokens
        if length > bound + 1e-9:
            raise BadInput(f"{where}: spec_accept_length {length:g}, but a verify forward commits at most {width} "
                           f"tokens ({why}){distrust}")


def _count(meta: dict, key: str, url: str, prompt: Prompt) -> int | None:
    """An optional count of meta_info: absent is None, anything but a whole number in range is refused."""
    v = meta.get(key)
    if v is None:
        return None
    if type(v) is not int or not 0 <= v <= MAX_COUNT:
        raise BadInput(f"{url}: meta_info of prompt {prompt.id} gives {key} {v!r}, not a count between 0 and "
                        f"{MAX_COUNT}; the server's figures cannot be trusted, so none is reported")
    return v


def query(base_url: str, prompts: list[Prompt], max_new: int, timeout: float, concurrency: int,
          on_done: Callable[[int], None] | None = None, steps: int | None = None) -> list[ServerResult]:
    url = base_url.rstrip("/") + "/generate"
    if not url.startswith(("http://", "https://")):
        raise BadInput(f"--server {base_url!r} must be an http:// or https:// URL")
    results: list[ServerResult] = []
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        for r in pool.map(lambda p: _one(url, p, max_new, timeout, steps), prompts):
            results.append(r)
            if on_done is not None:
                on_done(len(results))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # a stop or a failure sends no further prompt
        raise
    pool.shutdown()
    return results


def summarize(results: list[ServerResult], server: str, excluded: int) -> ServerReport:
    mean = sum(r.accept_length for r in results) / len(results)
    weighted: dict[str, Any] = {}
    if all(r.verify_ct and r.completion_tokens is not None for r in results):
        tokens = sum(r.completion_tokens or 0 for r in results)
        verifies = sum(r.verify_ct or 0 for r in results)
        weighted = {"completion_tokens": tokens, "verify_ct": verifies,
                    "token_weighted_accept_length": round(tokens / verifies, 4)}
    return ServerReport(server=server, excluded_as_training=excluded, prompts=len(results),
                        mean_spec_accept_length=round(mean, 4), **weighted,
                        per_prompt=tuple(ServerPrompt(id=r.id, spec_accept_length=r.accept_length,
                                                      spec_verify_ct=r.verify_ct,
                                                      completion_tokens=r.completion_tokens) for r in results))


def run_server(opts: Options, events: EventWriter) -> ServerReport:
    assert opts.server is not None
    chosen = held_out(opts, 1 << 30)
    n = len(chosen.prompts)
    say(events, f"{n} held-out prompts to {opts.server}/generate, up to {opts.max_new_tokens} new tokens each")
    results = query(opts.server, chosen.prompts, opts.max_new_tokens, opts.timeout, opts.concurrency,
                    on_done=lambda done: events.progress(done, n, unit="prompts"), steps=opts.num_steps)
    report = summarize(results, opts.server, chosen.excluded)
    say(events, f"mean spec_accept_length {report.mean_spec_accept_length:.3f} over {n} responses")
    events.metric("acceptance_length", report.mean_spec_accept_length)
    return report
