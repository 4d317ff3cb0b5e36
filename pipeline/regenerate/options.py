"""The command line of `python -m pipeline.regenerate`, parsed into one frozen Options: each
default written once, in `Options` (the ones that follow other flags in `Options.from_flags`),
and `validate()` refuses what a run cannot use. Every option that costs time, memory or sockets
has a bound, and a value past it is exit 2 with the flag, the value and the range. The sampling
defaults follow docs/regenerate.md.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline import cpu_threads
from pipeline.chat.sources import parse_role_map
from pipeline.regenerate.errors import BadInput

PROG = "python -m pipeline.regenerate"
MAX_NEW_TOKENS = 32768
MAX_CONCURRENCY = 1024
MAX_BATCH = 1024
MAX_TIMEOUT = 3600.0
MAX_RETRIES = 20
MAX_SERVERS = 64
# What the run's output depends on: a resumed run must use the same, or its records would mix.
GENERATION_KEYS = ("backend", "model", "served_model", "max_new_tokens", "temperature", "top_p", "seed",
                   "samples_per_prompt", "trim_loops")
MAX_SAMPLES = 64


@dataclass(frozen=True)
class Options:
    """What a run was asked for, every default filled in: the stats and the resume read these."""

    sources: tuple[Path, ...]
    out: Path
    stats: Path
    backend: str
    model: Path | None = None
    device: str = "cpu"
    dtype: str = "fp32"
    batch_size: int = 16
    max_prompt_tokens: int | None = None
    servers: tuple[str, ...] = ()
    served_model: str | None = None
    concurrency: int = 32
    timeout: float = 600.0
    retries: int = 3
    max_consecutive_failures: int = 8
    max_new_tokens: int = 2048
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    samples_per_prompt: int = 1
    trim_loops: bool = False
    limit: int | None = None
    role_map: dict[str, str] = field(default_factory=dict)
    max_invalid: float = 0.05
    strict: bool = False
    max_failed_share: float = 0.05
    threads: int | None = None  # torch's CPU threads, hf backend (None: pipeline/cpu_threads.py chooses)

    @classmethod
    def from_flags(cls, a: argparse.Namespace) -> Options:
        """The parsed flags, with the defaults that follow other flags filled in here and nowhere
        else: the stats beside --out, the dtype by --device, the served model named by --model's
        path, each server's URL without its trailing slash."""
        return cls(
            sources=tuple(a.sources), out=a.out, stats=a.stats or stats_beside(a.out), backend=a.backend,
            model=a.model, device=a.device, dtype=a.dtype or dtype_for(a.device), batch_size=a.batch_size,
            max_prompt_tokens=a.max_prompt_tokens, servers=tuple(u.rstrip("/") for u in a.server),
            served_model=a.served_model if a.served_model is not None else (str(a.model) if a.model else None),
            concurrency=a.concurrency, timeout=a.timeout, retries=a.retries,
            max_consecutive_failures=a.max_consecutive_failures, max_new_tokens=a.max_new_tokens,
            temperature=a.temperature, top_p=a.top_p, seed=a.seed, samples_per_prompt=a.samples_per_prompt,
            trim_loops=a.trim_loops, limit=a.limit, role_map=parse_role_map(a.role_map),
            max_invalid=a.max_invalid, strict=a.strict, max_failed_share=a.max_failed_share, threads=a.threads)

    def validate(self) -> None:
        """BadInput for a value past its bound or a flag its backend cannot use; nothing is filled in."""
        _bound("--max-new-tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        _bound("--temperature", self.temperature, 0, 2)
        if not 0 < self.top_p <= 1:
            raise BadInput(f"--top-p must be more than 0 and at most 1, got {self.top_p:g}")
        _bound("--seed", self.seed, 0, 2**63 - 1)
        _bound("--max-invalid", self.max_invalid, 0, 1)
        _bound("--samples-per-prompt", self.samples_per_prompt, 1, MAX_SAMPLES)
        if self.samples_per_prompt > 1 and self.temperature == 0:
            raise BadInput(f"--samples-per-prompt {self.samples_per_prompt} needs --temperature above 0: greedy "
                           "decoding gives the same answer every time")
        _bound("--max-failed-share", self.max_failed_share, 0, 1)
        if self.limit is not None:
            _bound("--limit", self.limit, 1, 2**62)
        if self.backend == "hf":
            self._validate_hf()
        else:
            self._validate_server()

    def _validate_hf(self) -> None:
        if self.model is None:
            raise BadInput("--backend hf needs --model (the target's folder)")
        if self.servers:
            raise BadInput("--server is for --backend server; --backend hf runs the model itself")
        _bound("--batch-size", self.batch_size, 1, MAX_BATCH)
        if self.max_prompt_tokens is not None:
            _bound("--max-prompt-tokens", self.max_prompt_tokens, 1, 10**7)
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise BadInput(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")

    def _validate_server(self) -> None:
        if self.trim_loops:
            raise BadInput("--trim-loops is for --backend hf, which sees each answer's tokens; a server returns "
                           "text: drop the flag")
        if not self.servers:
            raise BadInput("--backend server needs --server URL (e.g. http://127.0.0.1:30000)")
        if len(self.servers) > MAX_SERVERS:
            raise BadInput(f"at most {MAX_SERVERS} --server URLs, got {len(self.servers)}")
        for url in self.servers:
            if not url.startswith(("http://", "https://")):
                raise BadInput(f"--server {url!r}: must start with http:// or https://")
        if len(set(self.servers)) != len(self.servers):
            raise BadInput("--server: the same URL is given twice")
        if self.served_model is None:
            raise BadInput("--backend server needs --served-model NAME (or --model PATH, the name SGLang lists)")
        _bound("--concurrency", self.concurrency, 1, MAX_CONCURRENCY)
        _bound("--timeout", self.timeout, 1, MAX_TIMEOUT)
        _bound("--retries", self.retries, 0, MAX_RETRIES)
        _bound("--max-consecutive-failures", self.max_consecutive_failures, 1, 10**6)

    def to_json(self) -> dict:
        d = asdict(self)
        d["sources"] = [str(s) for s in self.sources]
        for k in ("out", "stats", "model"):
            d[k] = None if d[k] is None else str(d[k])
        d["servers"] = list(self.servers)
        return d

    def generation(self) -> dict:
        d = self.to_json()
        return {k: d[k] for k in GENERATION_KEYS}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Answer every user turn of chat datasets with the target "
                                "model, writing records merge reads (resumable).")
    p.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="chat files (JSONL or a JSON array) or folders of *.jsonl / *.json, as merge reads them")
    p.add_argument("--out", required=True, type=Path, help="output JSONL; rerunning the same command resumes it")
    p.add_argument("--stats", type=Path, help="stats JSON (default <out stem>.stats.json beside --out)")
    p.add_argument("--backend", required=True, choices=["hf", "server"])
    h = p.add_argument_group("hf backend (a target that fits one device)")
    h.add_argument("--model", type=Path, help="the target's save_pretrained folder (with a chat template)")
    h.add_argument("--device", default=Options.device, help=f"cpu, cuda or cuda:N (default {Options.device})")
    h.add_argument("--dtype", default=None, choices=["bf16", "fp16", "fp32"],
                   help="weights' dtype (default fp32 on cpu, bf16 on cuda)")
    h.add_argument("--batch-size", type=int, default=Options.batch_size,
                   help=f"slots: answers decoded together, a slot refilled as its record ends (1..{MAX_BATCH}, "
                   f"default {Options.batch_size}; 256 for a small target on a big GPU: docs/regenerate.md)")
    h.add_argument("--max-prompt-tokens", type=int, help="skip a turn whose prompt (the chat so far) is longer, "
                   "counted as prompt_too_long (default: the target's positions less --max-new-tokens); on a CPU "
                   "the prefill of long chats is what costs")
    s = p.add_argument_group("server backend (SGLang or any OpenAI-compatible server)")
    s.add_argument("--server", action="append", default=[], metavar="URL",
                   help="base URL such as http://127.0.0.1:30000; repeat for several servers")
    s.add_argument("--served-model", help="the model name the server must list in /v1/models (default: --model's "
                   "path as written, which is what SGLang lists)")
    s.add_argument("--concurrency", type=int, default=Options.concurrency,
                   help=f"requests in flight per server (1..{MAX_CONCURRENCY}, default {Options.concurrency})")
    s.add_argument("--timeout", type=float, default=Options.timeout,
                   help=f"seconds one request may take (default {Options.timeout:g})")
    s.add_argument("--retries", type=int, default=Options.retries,
                   help=f"retries of a failed request, with backoff (default {Options.retries})")
    s.add_argument("--max-consecutive-failures", type=int, default=Options.max_consecutive_failures,
                   help="failed requests in a row after which a server counts as dead: exit 4 "
                   f"(default {Options.max_consecutive_failures})")
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=Options.max_new_tokens,
                   help=f"longest answer, in tokens (default {Options.max_new_tokens})")
    g.add_argument("--temperature", type=float, default=Options.temperature,
                   help=f"0 is greedy (default {Options.temperature})")
    g.add_argument("--top-p", type=float, default=Options.top_p, help=f"nucleus sampling (default {Options.top_p}: off)")
    g.add_argument("--seed", type=int, default=Options.seed, help="every answer's sampling seed derives from it and "
                   f"the record's id, so a resumed run gives the same answers (default {Options.seed})")
    g.add_argument("--samples-per-prompt", type=int, default=Options.samples_per_prompt, metavar="N",
                   help=f"answer every record N times (1..{MAX_SAMPLES}, default {Options.samples_per_prompt}), each sample its own record "
                   "'<id>#s<k>' with its own seeds; needs --temperature above 0")
    g.add_argument("--trim-loops", action="store_true",
                   help="stop an answer at the token that completes an exact loop and keep the loop's first two "
                   "periods (hf backend; docs/regenerate.md)")
    d = p.add_argument_group("data")
    d.add_argument("--limit", type=int, help="regenerate at most this many records (the first ones, in input order)")
    d.add_argument("--role-map", default="", help="extra roles, e.g. bing=assistant,chatgpt=assistant")
    d.add_argument("--max-invalid", type=float, default=Options.max_invalid,
                   help=f"share of a source's records that may be unusable before it is refused "
                   f"(default {Options.max_invalid})")
    d.add_argument("--strict", action="store_true", help="stop at the first unusable record (exit 2)")
    d.add_argument("--max-failed-share", type=float, default=Options.max_failed_share,
                   help="share of this run's records that may fail (bad answers, refusals; a prompt too long for "
                   "the target does not count) before the run is exit 4, not done; a run that writes no record "
                   f"is exit 4 too (default {Options.max_failed_share})")
    cpu_threads.add_option(p)
    return p


def stats_beside(out: Path) -> Path:
    """Where the stats go when --stats is not given."""
    return out.with_name(f"{out.stem}.stats.json")


def dtype_for(device: str) -> str:
    """The weights' dtype when --dtype is not given: fp32 on a CPU, bf16 on a GPU."""
    return "fp32" if device == "cpu" else "bf16"


def _bound(flag: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise BadInput(f"{flag} must be {lo:g}..{hi:g}, got {value:g}")


def parse(argv: list[str] | None = None) -> Options:
    """The options of a command line, its defaults filled in (`Options.from_flags`); argparse's
    own errors exit 2 with its usage, a --role-map that does not parse is BadInput."""
    return Options.from_flags(build_parser().parse_args(argv))
