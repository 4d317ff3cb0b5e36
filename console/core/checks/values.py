"""Named values an expression reads (`stats.tokens`): a JSON file a phase wrote, a
number, or the JSON a program prints (`python -m pipeline.extract --estimate --json`). A stage's
record among them (its stats, its `--estimate --json` line) is read through its record first
(`pipeline/records/known.py`): one of a version this console does not know, or with a field of
the wrong type, fails the check naming the file and the key, rather than lending a figure."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from console.core.checks.context import CheckContext
from console.core.checks.subproc import program, run_bounded
from console.core.figures.expr import parse_number
from pipeline.records import known
from pipeline.records.codec import RecordError

COMMAND_TIMEOUT = 60.0


class ValueSourceError(ValueError):
    """A value could not be read; the text says which, from where, and why."""


def _json_file(name: str, path: Path, ctx: CheckContext) -> Any:
    """The file's JSON; a stage's record (its stats, its report) read through the record."""
    try:
        return known.load_file(path)
    except FileNotFoundError:
        producer = ctx.producer_of(path)
        hint = f" (phase '{producer.id}' writes it: run it first)" if producer else ""
        raise ValueSourceError(f"value '{name}': {path} does not exist{hint}") from None
    except RecordError as e:
        raise ValueSourceError(f"value '{name}': {e}") from None
    except OSError as e:
        raise ValueSourceError(f"value '{name}': cannot read {path}: {getattr(e, 'why', None) or e.strerror or e}") \
            from None
    except ValueError as e:
        raise ValueSourceError(f"value '{name}': {path} is not valid JSON: {e}") from None


def _command(name: str, entry: Mapping[str, Any], ctx: CheckContext) -> Any:
    argv = list(entry["command"])
    timeout = float(entry.get("timeout") or COMMAND_TIMEOUT)
    done = run_bounded(ctx.argv(argv), ctx.root, timeout, env=ctx.env())
    shown = program(argv)
    if done.error:
        raise ValueSourceError(f"value '{name}': {done.error}")
    if done.timed_out:
        raise ValueSourceError(f"value '{name}': {shown} did not finish within {timeout:g} s")
    if done.code != 0:
        last = done.tail(1)
        raise ValueSourceError(f"value '{name}': {shown} exited {done.code}"
                               + (f": {last[0]}" if last else ""))
    try:
        return known.load_output(done.stdout, shown)
    except RecordError as e:
        raise ValueSourceError(f"value '{name}': {e}") from None
    except ValueError:
        first = done.stdout.strip().splitlines()[:1]
        raise ValueSourceError(f"value '{name}': {shown} did not print JSON"
                               + (f" (printed {first[0][:120]!r})" if first else " (printed nothing)")) from None


def load_values(spec: Mapping[str, Any] | None, ctx: CheckContext) -> dict[str, Any]:
    """Every named value, read now; ValueSourceError names the first that cannot be read."""
    out: dict[str, Any] = {}
    for name, src in (spec or {}).items():
        if isinstance(src, Mapping):
            out[name] = _command(name, src, ctx)
        elif isinstance(src, (int, float)):
            out[name] = src
        else:
            text = str(src)
            try:
                out[name] = parse_number(text)
                continue
            except ValueError:
                pass
            out[name] = _json_file(name, ctx.resolve(text), ctx)
    return out


def sources(spec: Mapping[str, Any] | None, ctx: CheckContext) -> dict[str, Any]:
    """Where each value came from, for evidence (paths resolved, commands joined)."""
    shown: dict[str, Any] = {}
    for name, src in (spec or {}).items():
        if isinstance(src, Mapping):
            shown[name] = {"command": list(src["command"])}
        elif isinstance(src, (int, float)):
            shown[name] = src
        else:
            shown[name] = str(ctx.resolve(str(src)))
    return shown


def values_budget(args: Mapping[str, Any]) -> float:
    """Seconds the value commands of a check may take in all (its registry deadline)."""
    return sum(float(v.get("timeout") or COMMAND_TIMEOUT) + 5
               for v in (args.get("values") or {}).values() if isinstance(v, Mapping))


def named_values(args: Mapping[str, Any], ctx: CheckContext, evidence: dict[str, Any]) -> dict[str, Any]:
    """The check's `values:` read now, their sources noted in the evidence; raises
    ValueSourceError like load_values."""
    if not args.get("values"):
        return {}
    evidence["values_from"] = sources(args["values"], ctx)
    return load_values(args["values"], ctx)
