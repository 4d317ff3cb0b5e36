"""Held-out prompts: token ids of a conversation up to its first assistant answer.

Acceptance is only meaningful on prompts the drafter was not trained on. Prompts come from
a JSONL file (chat records in any shape merge accepts, or merged records with
`input_ids` + `loss_mask`, whose prompt is everything before the first loss-masked token),
or for the demo from the demo's own generator at another seed. `--exclude` drops every
prompt that also opens a record of the training set, so "held out" is checked, not hoped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.chat.records import parse_record
from pipeline.chat.synthetic import generate
from pipeline.evaluate.errors import BadInput

if TYPE_CHECKING:
    from pipeline.evaluate.options import Options

MAX_PROMPTS = 10_000
MAX_LINE_BYTES = 64 << 20


CHARS_PER_TOKEN_BOUND = 64  # no tokenizer packs more characters into one token on real text


@dataclass(frozen=True)
class Prompt:
    id: str
    input_ids: list[int]
    too_long: bool = False  # longer than the bound without tokenizing it: input_ids is empty


@dataclass(frozen=True)
class PromptSet:
    prompts: list[Prompt]
    excluded: int  # also a training prompt
    too_long: int  # no room for the answer within the target's context


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    if not path.is_file():
        raise BadInput(f"prompts file {path} does not exist or is not a file")
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if len(line) > MAX_LINE_BYTES:
                raise BadInput(f"{path}:{n}: line longer than {MAX_LINE_BYTES >> 20} MiB; one record per line")
            if line.strip():
                yield n, line


def _json(line: bytes, where: str, hint: str = "") -> Any:
    """One line's JSON value; BadInput naming the line when it is not JSON, or nested past what
    the decoder's recursion takes (`[[[[...` a million deep), never a RecursionError."""
    try:
        return json.loads(line)
    except ValueError as e:
        raise BadInput(f"{where}: not valid JSON ({e}){hint}") from None
    except RecursionError:
        raise BadInput(f"{where}: JSON nested too deeply to read (a record is a few levels of objects and "
                       f"lists){hint}") from None


def merged_prompt(obj: dict, where: str) -> list[int]:
    """The tokens before the first loss-masked one of a merged record."""
    ids, mask = obj.get("input_ids"), obj.get("loss_mask")
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise BadInput(f"{where}: field 'input_ids' must be a list of integers")
    if not isinstance(mask, list) or len(mask) != len(ids):
        raise BadInput(f"{where}: field 'loss_mask' must be a list as long as 'input_ids'")
    first = next((i for i, m in enumerate(mask) if m), None)
    return ids[:first] if first else []


def chat_prompt(tokenizer: Any, messages: list[dict], where: str, max_tokens: int = 1 << 30) -> list[int] | None:
    """The conversation up to its first assistant turn, with the generation prompt; None when
    its text is too long to fit `max_tokens` whatever the tokenizer (never tokenized: a 10 MB
    prompt cost a minute and gigabytes before it was found too long)."""
    if sum(len(str(m.get("content", ""))) for m in messages) > max_tokens * CHARS_PER_TOKEN_BOUND:
        return None
    cut = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    head = messages[:cut]
    if not head:
        return []
    try:
        text = tokenizer.apply_chat_template(head, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - a template may raise anything on a conversation it rejects
        raise BadInput(f"{where}: the target's chat template cannot render this record ({e})") from None
    if len(text) > max_tokens * CHARS_PER_TOKEN_BOUND:
        return None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def read_file(path: Path, load_tokenizer: Callable[[], Any | None], max_tokens: int = 1 << 30) -> Iterator[Prompt]:
    """Prompts of a JSONL file; the tokenizer is loaded only when a chat record needs it."""
    tokenizer = None
    for n, line in _lines(path):
        where = f"{path}:{n}"
        obj = _json(line, where)
        if isinstance(obj, dict) and "input_ids" in obj:
            yield Prompt(str(obj.get("id", f"{path.name}:{n}")), merged_prompt(obj, where))
            continue
        tokenizer = tokenizer or load_tokenizer()
        if tokenizer is None:
            raise BadInput(f"{where}: a chat record needs the target's tokenizer; pass --target")
        rec = parse_record(line, str(path), n)
        ids = chat_prompt(tokenizer, rec.conversations, where, max_tokens)
        yield Prompt(rec.id, ids or [], too_long=ids is None)


def demo_prompts(tokenizer: Any, count: int, seed: int) -> Iterator[Prompt]:
    """Chats from the demo's generator at `seed`, taken from each source in turn."""
    sources = generate(seed, quick=False)
    names = sorted(sources)
    for i in range(count):
        recs = sources[names[i % len(names)]]
        rec = recs[(i // len(names)) % len(recs)]
        ids = chat_prompt(tokenizer, rec["conversations"], rec["id"])
        assert ids is not None  # None only past a bound, and none is given
        yield Prompt(f"demo-{seed}:{rec['id']}", ids)


def _digest(ids: list[int]) -> bytes:
    return hashlib.blake2b(json.dumps(ids).encode(), digest_size=12).digest()


def training_prompts(path: Path) -> set[bytes]:
    """Digests of the prompts of a merged training set (bounded memory: 12 bytes each)."""
    seen: set[bytes] = set()
    for n, line in _lines(path):
        obj = _json(line, f"{path}:{n}", "; --exclude takes a merged dataset")
        if not isinstance(obj, dict):
            raise BadInput(f"{path}:{n}: expected a JSON object; --exclude takes a merged dataset")
        seen.add(_digest(merged_prompt(obj, f"{path}:{n}")))
    return seen


def check_ids(prompts: list[Prompt], vocab_size: int, source: str) -> None:
    """Every id is one of the target's: an id past its embedding is an index error deep in a
    forward (or a device assert on a GPU), never a figure."""
    for p in prompts:
        bad = next((t for t in p.input_ids if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise BadInput(f"{source}: prompt {p.id} holds token id {bad}, outside the target's vocabulary "
                           f"0..{vocab_size - 1}; were these records tokenized for another model?")


def select(candidates: Iterator[Prompt], limit: int, max_prompt_len: int, exclude: set[bytes] | None) -> PromptSet:
    if not 1 <= limit <= MAX_PROMPTS:
        raise BadInput(f"--limit must be between 1 and {MAX_PROMPTS}, got {limit}")
    kept: list[Prompt] = []
    excluded = too_long = 0
    for p in candidates:
        if p.too_long:
            too_long += 1
            continue
        if not p.input_ids:
            continue
        if exclude is not None and _digest(p.input_ids) in exclude:
            excluded += 1
            continue
        if len(p.input_ids) > max_prompt_len:
            too_long += 1
            continue
        kept.append(p)
        if len(kept) == limit:
            break
    return PromptSet(kept, excluded, too_long)


def tokenizer_of(target: Path | None) -> Any | None:
    """The target's tokenizer (None without --target), loaded only when a chat needs rendering."""
    if target is None:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(target))
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot load the tokenizer of {target} (--target): {str(e).splitlines()[0]}") from None


def held_out(opts: Options, max_prompt_len: int, vocab_size: int | None = None) -> PromptSet:
    """The prompts an evaluation scores: --prompts or --demo-prompts, less --exclude's and those
    too long for the target's context; BadInput when none is left."""
    if opts.demo_prompts is not None:
        if not 1 <= opts.demo_prompts <= 10_000:
            raise BadInput(f"--demo-prompts must be between 1 and 10000, got {opts.demo_prompts}")
        candidates = demo_prompts(tokenizer_of(opts.target), opts.demo_prompts * 4, opts.demo_seed)
        limit = min(opts.limit, opts.demo_prompts)
    else:
        assert opts.prompts is not None  # validate(): one of the two
        candidates = read_file(opts.prompts, lambda: tokenizer_of(opts.target), max_prompt_len)
        limit = opts.limit
    exclude = training_prompts(opts.exclude) if opts.exclude is not None else None
    chosen = select(candidates, limit, max_prompt_len, exclude)
    if vocab_size is not None:
        check_ids(chosen.prompts, vocab_size, f"--prompts {opts.prompts}" if opts.prompts else "--demo-prompts")
    if not chosen.prompts:
        raise BadInput(f"no prompts left to evaluate ({chosen.excluded} also in --exclude, "
                       f"{chosen.too_long} too long for the target's context)")
    return chosen
