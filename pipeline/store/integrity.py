"""Is a hidden-state store whole? `verify_store` answers for `--verify`, the console's
`store_intact` check (through `--verify --json`) and the trainer; `resume_damage` is the
cheaper look a resume takes before it trusts the manifest. Torch-free.

What the manifest promises for each sample (one JSON line, written by `sample_file.write_sample`):

    {"index": 17, "id": "...", "tokens": 412, "bytes": 13505656,
     "file": "rows_0/17.safetensors", "xxh3": "<16 hex: xxh3_64 of the whole file>"}

`verify_store(out, model=None, checksums="sample"|"all"|"none", sample=64) -> StoreReport`:
- meta.json exists and is this format; the manifest lists every index below the run's
  total (meta "records", cut by meta "limit");
- every listed file exists with the manifest's size (one stat each);
- the checksums of all files ("all"), of `sample` random ones plus the last `sample`
  written ("sample"), or none; the files whose checksum is read are read for their meaning
  too (meaning.py: every value), and every other file's header is ("sample": a header is
  one small read, and a rotted one would stop a trainer at that sample);
- with `model`, the target's weight fingerprint equals meta's `target_fingerprint`;
- meta's `store_dtype`, when it has one, is one this version reads (float8_e4m3fn: an fp8
  store's samples are checked like any other, their scales inside the checksummed bytes).
`StoreReport.ok` is True when `problems` is empty; each problem is one line naming the file
(and the sample and key) or the field. `summary()` says what was not read; `to_json()` is what
`--verify --json` prints.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.checksum import ALGO, file_checksum
from pipeline.program_edge import BadInput
from pipeline.store.layout import FP8
from pipeline.store.manifest import manifest_in_order
from pipeline.store.meaning import LayoutOf, Meaningless, check_file, check_header
from pipeline.store.meta import FORMAT, read_meta, store_dtype
from pipeline.target.weights import FingerprintError, target_fingerprint

CHECKSUM_MODES = ("all", "sample", "none")
RESUME_CHECKSUMS = 64
MAX_PROBLEM_LINES = 50


def expected_samples(meta: dict) -> int | None:
    """How many samples a finished store holds: meta's records, cut by its --limit."""
    records = meta.get("records")
    if not isinstance(records, int):
        return None
    limit = meta.get("limit")
    return min(records, limit) if isinstance(limit, int) else records


def _entry_problem(out: Path, e: dict, checksum: bool) -> str | None:
    """What is wrong with one manifest entry's file, or None."""
    rel, want = e.get("file"), e.get("bytes")
    if not isinstance(rel, str) or not isinstance(want, int):
        return f"manifest line for sample {e['index']} lacks file or bytes: {e}"
    path = out / rel
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return f"{path}: missing (sample {e['index']}, {e.get('tokens')} tokens, manifest says {want} bytes)"
    except OSError as err:
        return f"{path}: cannot stat ({err.strerror}) (sample {e['index']})"
    if size != want:
        return (f"{path}: {size} bytes, the manifest says {want} (sample {e['index']}, {e.get('tokens')} tokens); "
                "truncated or overwritten")
    if checksum:
        want_sum = e.get(ALGO)
        if not isinstance(want_sum, str):
            return f"{path}: the manifest line has no {ALGO} checksum (sample {e['index']})"
        try:
            got = file_checksum(path)
        except OSError as err:
            return f"{path}: cannot read ({err.strerror}) (sample {e['index']})"
        if got != want_sum:
            return (f"{path}: {ALGO} {got}, the manifest says {want_sum} (sample {e['index']}, {e.get('tokens')} "
                    "tokens); its content changed after it was written")
    return None


def resume_damage(out: Path, entries: list[dict], last: int = RESUME_CHECKSUMS) -> dict[int, str]:
    """Samples a resume must not trust, by index -> why: every file's size, and the
    checksums of the `last` entries written (in `entries` order)."""
    out = Path(out)
    bad: dict[int, str] = {}
    tail = {e["index"] for e in entries[-last:]} if last > 0 else set()
    for e in entries:
        problem = _entry_problem(out, e, checksum=e["index"] in tail)
        if problem:
            bad[e["index"]] = problem
    return bad


def _layout(out: Path, meta: dict, rep: StoreReport) -> LayoutOf | None:
    if not meta:
        return None
    try:
        return LayoutOf.of_meta(meta, out / "meta.json")
    except BadInput as e:
        rep.add(str(e))
        return None


def _meaning_problem(path: Path, e: dict, layout: LayoutOf, whole: bool, rep: StoreReport) -> str | None:
    """The sample's header against what the store declares, and with `whole` every value."""
    if not isinstance(e.get("tokens"), int) or isinstance(e["tokens"], bool) or e["tokens"] <= 0:
        return f"manifest line for sample {e['index']} has no usable token count: {e}"
    rep.headers_checked += 1
    rep.values_checked += whole
    try:
        (check_file if whole else check_header)(path, e["tokens"], layout, e["index"])
    except Meaningless as err:
        return str(err)
    return None


@dataclass
class StoreReport:
    out: str
    ok: bool = False
    expected: int | None = None  # samples a finished store holds (meta records, --limit)
    samples: int = 0  # in the manifest
    tokens: int = 0
    bytes: int = 0
    sizes_checked: int = 0
    checksums_checked: int = 0
    headers_checked: int = 0  # the tensors each sample declares (meaning.header_problem)
    values_checked: int = 0  # every value read for its meaning (meaning.rows_problem): the checksummed files
    target_fingerprint: str | None = None  # meta's
    model_fingerprint: str | None = None  # of --model, when given
    store_dtype: str | None = None  # what the sample files hold (meta's store_dtype, else its dtype)
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0

    def add(self, line: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEM_LINES:
            self.problems.append(line)

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        head = (f"store {self.out}: {self.samples}/{self.expected if self.expected is not None else '?'} samples, "
                f"{self.tokens:,} tokens, {self.bytes:,} bytes; {self.sizes_checked} sizes, {self.headers_checked} "
                f"headers, {self.checksums_checked} checksums and the values of {self.values_checked} samples checked")
        unread = self.samples - self.values_checked
        if unread > 0:
            head += (f"; the checksums and values of {unread} samples were not read (a full --verify, without "
                     "--sample, reads every one)" if self.ok else
                     f"; the values of {unread} samples were not read (left out by --sample, or failing a check "
                     "first)")
        if self.ok:
            return head + "; intact"
        more = self.problem_count - len(self.problems)
        tail = f" (and {more} more)" if more > 0 else ""
        return head + f"; {self.problem_count} problem(s){tail}"


def verify_store(out: Path | str, *, model: Path | str | None = None, checksums: str = "sample",
                 sample: int = RESUME_CHECKSUMS, seed: int | None = None) -> StoreReport:
    """Check the store at `out` (module docstring); raises BadInput only when `out` is not a folder."""
    if checksums not in CHECKSUM_MODES:
        raise ValueError(f"checksums must be one of {CHECKSUM_MODES}, got {checksums!r}")
    out = Path(out)
    if not out.is_dir():
        raise BadInput(f"no store at {out}: not a folder (--out)")
    rep = StoreReport(out=str(out))
    meta = _checked_meta(out, rep)
    rep.store_dtype = store_dtype(meta) if meta else None
    rep.expected = expected_samples(meta)
    rep.target_fingerprint = meta.get("target_fingerprint")
    entries = manifest_in_order(out)
    rep.samples = len(entries)
    rep.tokens = sum(int(e.get("tokens", 0)) for e in entries)
    rep.bytes = sum(int(e.get("bytes", 0)) for e in entries)
    _check_complete(out, meta, entries, rep)
    to_sum = _to_checksum(entries, checksums, sample, seed)
    layout = _layout(out, meta, rep) if checksums != "none" else None
    for entry in entries:
        summed = entry["index"] in to_sum
        problem = _entry_problem(out, entry, checksum=summed)
        rep.sizes_checked += 1
        rep.checksums_checked += summed
        if problem is None and layout is not None:
            problem = _meaning_problem(out / entry["file"], entry, layout, whole=summed, rep=rep)
        if problem:
            rep.add(problem)
    if model is not None:
        try:
            rep.model_fingerprint = target_fingerprint(model)
        except FingerprintError as e:
            rep.add(f"--model: {e}")
        else:
            if rep.model_fingerprint != rep.target_fingerprint:
                rep.add(f"{out / 'meta.json'}: target_fingerprint {rep.target_fingerprint}, but {model} has "
                        f"{rep.model_fingerprint}; the target's weights changed since this store was written")
    rep.ok = rep.problem_count == 0
    return rep


def _checked_meta(out: Path, rep: StoreReport) -> dict:
    """meta.json, with what is wrong in it added to `rep` ({} when it cannot be read)."""
    try:
        meta = read_meta(out)
    except BadInput as e:
        rep.add(str(e))
        meta = {}
    if meta is None:
        rep.add(f"{out / 'meta.json'}: missing; this is not a finished store (extraction never started here?)")
        meta = {}
    elif meta and meta.get("format") != FORMAT:
        rep.add(f"{out / 'meta.json'}: format {meta.get('format')!r}, expected {FORMAT!r}; "
                "re-extract into a new --out (this store predates size and checksum records)")
    if meta and meta.get("store_dtype") not in (None, FP8):
        rep.add(f"{out / 'meta.json'}: store_dtype {meta.get('store_dtype')!r} is not one this version reads "
                f"({FP8!r}, or none for states as captured); read it with the version that wrote it")
    return meta


def _check_complete(out: Path, meta: dict, entries: list[dict], rep: StoreReport) -> None:
    """The manifest lists every sample the dataset has, and none it has not."""
    if rep.expected is not None:
        have = {e["index"] for e in entries}
        missing = [i for i in range(rep.expected) if i not in have]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            rep.add(f"{out}/manifest.jsonl: {len(missing)} of {rep.expected} samples missing (indices {shown}); "
                    "rerun the extraction to resume")
        records = meta["records"]
        extra = [i for i in have if i >= records or i < 0]
        if extra:
            rep.add(f"{out}/manifest.jsonl: {len(extra)} samples outside the dataset's 0..{records - 1} "
                    f"(e.g. {min(extra)})")
    elif meta:
        rep.add(f"{out / 'meta.json'}: no 'records' count, cannot tell whether the manifest is complete")


def _to_checksum(entries: list[dict], checksums: str, sample: int, seed: int | None) -> set[int]:
    """The indices whose checksums and values are read: all, or `sample` random ones and the last
    `sample` written."""
    if checksums == "all":
        return {e["index"] for e in entries}
    if checksums == "sample" and sample > 0:
        picks = random.Random(seed).sample(entries, min(sample, len(entries)))
        return {e["index"] for e in picks} | {e["index"] for e in entries[-sample:]}
    return set()
