"""What fixes a failing check, when the config knows: the phase that writes a missing path
(it declares the path, or a folder holding it, among its `outputs:`), else the variable whose
value the check is about (`sglang_python` for a missing `/opt/sglang/bin/python`).

A newcomer reading "does not exist" needs the next step, not only the path: run that phase,
or set that variable. The hint goes at the end of the message and into the evidence
(`made_by`, `variable`), so the console, `eagle3 check` and the journal say the same."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from console.core.checks.result import CheckResult
from console.core.model.config import Config, Phase

_ENDS = "/:;,)'\"] "  # what may follow a value for it to be the whole value, not a prefix of a name


def shown_path(config: Config) -> str:
    """The config as an operator would type it here: relative to the working folder when
    under it, else absolute."""
    rel = os.path.relpath(config.path)
    return str(config.path) if rel.startswith("..") else rel


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _texts(v)


def _mentions(text: str, value: str) -> bool:
    at = text.find(value)
    while at >= 0:
        end = at + len(value)
        if end == len(text) or text[end] in _ENDS:
            return True
        at = text.find(value, at + 1)
    return False


def variable_of(config: Config, texts: Iterable[str]) -> str | None:
    """The variable whose value (a path or a URL, as written or resolved against the config's
    folder) the texts mention, the longest such value first: `raw` (`/data/x/raw`) before
    `data` (`/data/x`) for `/data/x/raw/B1.jsonl`."""
    joined = "\n".join(texts)
    best: tuple[int, str] | None = None
    for name, value in config.vars.items():
        if "/" not in value or len(value) < 4:
            continue
        forms = {value.rstrip("/") or value}
        if "://" not in value:
            forms.add(str(config.resolve(value)).rstrip("/"))
        for form in forms:
            if _mentions(joined, form) and (best is None or len(form) > best[0]):
                best = (len(form), name)
    return best[1] if best else None


def producer_of(config: Config, path: str | os.PathLike[str], skip: str | None = None) -> Phase | None:
    """The phase (other than `skip`) that declares `path`, or else a folder holding it,
    among its outputs."""
    target = Path(os.path.abspath(config.resolve(path)))
    inside: Phase | None = None
    for ph in config.phases:
        if ph.id == skip:
            continue
        for out in ph.outputs:
            o = Path(os.path.abspath(config.resolve(out)))
            if o == target:
                return ph
            if inside is None and o in target.parents:
                inside = ph
    return inside


def missing_output(config: Config, texts: Iterable[str], skip: str | None = None) -> Phase | None:
    """The phase (other than `skip`) one of whose outputs the texts name, or a path inside,
    while that output does not exist yet (a stage's own error: `source …/split/train.jsonl
    does not exist`)."""
    joined = "\n".join(texts)
    for ph in config.phases:
        if ph.id == skip:
            continue
        for out in ph.outputs:
            full = str(config.resolve(out)).rstrip("/")
            if _mentions(joined, full) and not os.path.exists(full):
                return ph
    return None


def explain(results: list[CheckResult], config: Config, phase_id: str | None) -> list[CheckResult]:
    """The failing results with what fixes them said at the end of their message (new
    objects; passing ones as they were)."""
    cfg = shown_path(config)
    out = []
    for r in results:
        if r.status == "pass" or r.evidence.get("made_by") or r.evidence.get("variable"):
            out.append(r)
            continue
        texts = [r.message, *_texts(r.evidence)]
        path = r.evidence.get("path")
        made_by = producer_of(config, path, phase_id) if isinstance(path, str) and not os.path.exists(path) else None
        made_by = made_by or missing_output(config, texts, phase_id)
        if made_by is not None:
            maker = made_by.id
            note = "" if f"phase '{maker}'" in r.message else \
                f" (phase '{maker}' writes it: eagle3 run {cfg} {maker})"
            out.append(replace(r, message=r.message + note, evidence={**r.evidence, "made_by": maker}))
            continue
        var = variable_of(config, texts)
        if var is None:
            out.append(r)
            continue
        out.append(replace(r, message=f"{r.message}; set by the variable {var}",
                           evidence={**r.evidence, "variable": var}))
    return out
