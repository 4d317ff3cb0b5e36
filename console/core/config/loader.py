"""YAML to validated `Config`. The YAML is composed into nodes (not loaded into dicts)
so every error can name the line as well as the key: an operator editing a 300-line
config at 2 a.m. needs `demo.yaml:41: phases.extract.checks[2]: ...`, not a traceback."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from console.core.checks.registry import KINDS, default_name, validate
from console.core.config import commands
from console.core.config.composer import Loader, compose, restore
from console.core.config.interpolate import InterpolationError, resolve_vars, substitute
from console.core.config.overlay import overlay_path, read_saved
from console.core.model.config import (
    MAX_NOTIFY_TIMEOUT,
    MAX_PARALLEL,
    NOTIFY_EVENTS,
    CheckSpec,
    Config,
    NotifySpec,
    Phase,
)
from console.core.text.durations import parse_duration
from console.core.text.errors import ConfigError
from console.core.text.terminal_text import strip_controls
from pipeline import bounded_read

TOP_KEYS = ("name", "vars", "state_dir", "volumes", "shm_dump", "python", "notify", "parallel", "phases")
PHASE_KEYS = (
    "id", "title", "description", "run", "env", "needs", "checks", "verify", "ready",
    "inputs", "outputs", "deletes", "kind", "confirm", "python", "stall_after", "notify",
)
CHECK_META_KEYS = ("name", "severity")
MAX_CONFIG_BYTES = 4 * 2**20
MAX_EXPANDED = 16 * 2**20  # characters all interpolated values may add up to


PHASE_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _command(r, node: yaml.Node, key: str) -> list[str]:  # type: ignore[no-untyped-def]
    """An argv list, or a string split like a shell would (never run through one), each `${...}`
    substituted inside its word after the split; items as written, so YAML 1.1 never turns `yes`
    or `0755` into something else. A `${...}` inside a shell's `-c` script is refused (commands.py)."""
    if isinstance(node, yaml.SequenceNode):
        items = [(n, f"{key}[{i}]") for i, n in enumerate(r.sequence(node, key))]
        words = [r.string(n, k, interpolate=False, allow_empty=True, as_written=True) for n, k in items]
    else:
        try:
            words = commands.split_words(r.string(node, key, interpolate=False, as_written=True))
        except ValueError as e:
            raise r.error(node, key, f"cannot split the command like a shell would: {e}") from None
        items = [(node, key)] * len(words)
    code = commands.script_with_reference(words)
    if code is not None:
        raise r.error(items[code[0]][0], items[code[0]][1], code[1])
    argv = [r.string(n, k, as_written=True) if isinstance(node, yaml.SequenceNode)
            else r.interpolate(n, k, w) for (n, k), w in zip(items, words)]
    if not argv:
        raise r.error(node, key, "the command is empty")
    return argv

def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return f" (expected one of: {', '.join(choices)})"


class _Reader:
    """Walks composed YAML nodes, turning them into Python values and raising
    ConfigError with the node's line for anything off."""

    def __init__(self, file: Path, loader: Loader, lookup: Mapping[str, str] | None = None) -> None:
        self.file = file
        self.loader = loader
        self.lookup: Mapping[str, str] = lookup or {}
        self.used_env: set[str] = set()  # ${env:NAME} names whose values were used
        self.expanded = 0  # characters produced by interpolation so far

    def error(self, node: yaml.Node | None, key: str, message: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        return ConfigError(self.file, message, line=line, key=key)

    def mapping(self, node: yaml.Node, key: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, key, f"expected a mapping (key: value lines), got {self._kind(node)}")
        seen: dict[str, int] = {}
        out: list[tuple[str, yaml.Node, yaml.Node]] = []
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):
                raise self.error(knode, key, "keys must be plain names")
            k = str(restore(self.loader.construct_object(knode)))
            if k in seen:
                raise self.error(knode, f"{key}.{k}" if key else k,
                                 f"duplicate key (first given on line {seen[k]})")
            seen[k] = knode.start_mark.line + 1
            out.append((k, knode, vnode))
        return out

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, key, f"expected a list, got {self._kind(node)}")
        return list(node.value)

    def scalar(self, node: yaml.Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, key, f"expected a single value, got {self._kind(node)}")
        return restore(self.loader.construct_object(node))

    def string(self, node: yaml.Node, key: str, *, interpolate: bool = True, allow_empty: bool = False,
               as_written: bool = False) -> str:
        """`as_written`: a plain scalar keeps its text (YAML 1.1 would turn `yes` into true,
        `0755` into 493 and `1.10` into 1.1: wrong for an argv item or an env value)."""
        if as_written and isinstance(node, yaml.ScalarNode):
            value: Any = restore(node.value)
        else:
            value = self.scalar(node, key)
        if value is None or isinstance(value, (dict, list)):
            raise self.error(node, key, "expected a text value, got nothing" if value is None else "expected text")
        if isinstance(value, bool):
            value = "true" if value else "false"
        text = str(value)
        if interpolate:
            text = self.interpolate(node, key, text)
        if not text and not allow_empty:
            raise self.error(node, key, "must not be empty")
        return text

    def interpolate(self, node: yaml.Node, key: str, text: str) -> str:
        try:
            out = substitute(text, self.lookup, used_env=self.used_env)
        except InterpolationError as e:
            raise self.error(node, key, str(e)) from None
        # Each value is bounded; so is their sum (a long variable repeated in many items).
        self.expanded += len(out)
        if self.expanded > MAX_EXPANDED:
            raise self.error(node, key, f"the config expands to more than {MAX_EXPANDED} characters in all "
                                        "(a long variable used very many times?)")
        return out

    def boolean(self, node: yaml.Node, key: str) -> bool:
        value = self.scalar(node, key)
        if not isinstance(value, bool):
            raise self.error(node, key, f"expected true or false, got '{value}'")
        return value

    def string_list(self, node: yaml.Node, key: str) -> list[str]:
        if isinstance(node, yaml.ScalarNode) and self.scalar(node, key) is None:
            return []
        return [self.string(n, f"{key}[{i}]") for i, n in enumerate(self.sequence(node, key))]

    def plain(self, node: yaml.Node, key: str, command_at: Callable[[str], bool] = lambda key: False) -> Any:
        """Any YAML value as Python, strings interpolated (check arguments); a value at a key
        `command_at` names is a command, read as `_command` reads one."""
        if command_at(key) and not isinstance(node, yaml.MappingNode):
            return _command(self, node, key)
        if isinstance(node, yaml.MappingNode):
            return {k: self.plain(v, f"{key}.{k}", command_at) for k, _, v in self.mapping(node, key)}
        if isinstance(node, yaml.SequenceNode):
            return [self.plain(v, f"{key}[{i}]", command_at) for i, v in enumerate(node.value)]
        value = self.scalar(node, key)
        if isinstance(value, str):
            return self.interpolate(node, key, value)
        return value

    @staticmethod
    def _kind(node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        return f"'{restore(node.value)}'" if node.value else "nothing"


def load_config(
    path: str | Path,
    overrides: Mapping[str, str] | None = None,
    validate_check: Callable[[str, Any], str | None] = validate,
    saved: Mapping[str, str] | None = None,
) -> Config:
    """Read, validate and interpolate a pipeline config. Raises ConfigError only.
    `overrides` (--set) apply over the operator's remembered ones (`overlay.py`'s overlay
    beside the config, read here unless `saved` gives them)."""
    file = Path(path).expanduser()
    try:
        text = bounded_read.read_text(file, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(file, "config file not found; pass the path of a pipeline YAML (e.g. configs/demo.yaml)") from None
    except IsADirectoryError:
        raise ConfigError(file, "is a folder; pass the path of a pipeline YAML file") from None
    except bounded_read.FileTooLarge as e:
        size = f"is {e.size} bytes" if e.size is not None else f"is larger than {MAX_CONFIG_BYTES} bytes"
        raise ConfigError(file, f"{size}; a pipeline config is at most {MAX_CONFIG_BYTES} (is this the right file?)") from None
    except bounded_read.RefusedFile as e:
        raise ConfigError(file, e.why) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(file, f"cannot read the config: {e}") from None
    file = file.resolve()
    overrides = dict(overrides or {})
    if saved is None:
        saved = read_saved(file)

    loader, root = compose(file, text)
    try:
        if root is None:
            raise ConfigError(file, "the config is empty; it needs at least `name:` and `phases:`")
        return _build(file, text, loader, root, overrides, validate_check, saved)
    finally:
        loader.dispose()


def _build(file: Path, text: str, loader: Loader, root: yaml.Node,
           overrides: dict[str, str], validate_check: Callable[[str, Any], str | None],
           saved: Mapping[str, str]) -> Config:
    """In the order a reader needs: the top-level keys, the vars (everything else may refer to
    them) with the saved overrides and --set over them, the settings, then the phases."""
    r = _Reader(file, loader)
    top = _top_level(r, root)
    raw_vars, var_nodes = _raw_vars(r, top)
    overrides = _apply_overrides(file, raw_vars, saved, overrides)
    try:
        r.lookup = resolve_vars(raw_vars, used_env=r.used_env)
    except InterpolationError as e:
        raise r.error(var_nodes.get(e.var or ""), f"vars.{e.var}", str(e)) from None

    name = strip_controls(r.string(top["name"][1], "name") if "name" in top else file.stem)
    state_dir = r.string(top["state_dir"][1], "state_dir") if "state_dir" in top else "./.eagle3-state"
    volumes = r.string_list(top["volumes"][1], "volumes") if "volumes" in top else []
    shm_dump = r.string(top["shm_dump"][1], "shm_dump") if "shm_dump" in top else None

    def resolve(p: str) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() else (file.parent / q)

    python = _python(r, top["python"][1], "python", resolve) if "python" in top else None
    phases = _phases(r, top["phases"][1], resolve, validate_check)
    return Config(
        path=file,
        name=name,
        vars=dict(r.lookup),
        state_dir=resolve(state_dir).resolve(),
        volumes=tuple(resolve(v) for v in volumes),
        phases=tuple(phases),
        fingerprint=_fingerprint(text, overrides),
        overrides=overrides,
        saved_overrides=dict(saved),
        shm_dump=resolve(shm_dump) if shm_dump else None,
        python=python,
        notify=_notify(r, top["notify"][1], "notify") if "notify" in top else (),
        parallel=_parallel(r, top["parallel"][1], "parallel") if "parallel" in top else 1,
        secret_env=tuple(sorted(r.used_env)),
    )


def _top_level(r: _Reader, root: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    top = {k: (kn, vn) for k, kn, vn in r.mapping(root, "")}
    for k, (kn, _) in top.items():
        if k not in TOP_KEYS:
            raise r.error(kn, k, "unknown top-level key" + _did_you_mean(k, TOP_KEYS))
    if "phases" not in top:
        raise r.error(root, "phases", "missing: a config needs a `phases:` list")
    return top


def _raw_vars(r: _Reader, top: dict[str, tuple[yaml.Node, yaml.Node]]) -> tuple[dict[str, str], dict[str, yaml.Node]]:
    """The `vars:` as written (not yet interpolated), and the node of each for errors."""
    raw_vars: dict[str, str] = {}
    var_nodes: dict[str, yaml.Node] = {}
    if "vars" in top:
        vnode = top["vars"][1]
        if not (isinstance(vnode, yaml.ScalarNode) and r.scalar(vnode, "vars") is None):
            for k, kn, vn in r.mapping(vnode, "vars"):
                if not VAR_NAME.match(k):
                    raise r.error(kn, f"vars.{k}", "variable names use letters, digits, _ . - and start with a letter")
                raw_vars[k] = r.string(vn, f"vars.{k}", interpolate=False, allow_empty=True, as_written=True)
                var_nodes[k] = vn
    return raw_vars, var_nodes


def _apply_overrides(file: Path, raw_vars: dict[str, str], saved: Mapping[str, str],
                     overrides: dict[str, str]) -> dict[str, str]:
    """Set the saved overrides, then --set over them, in `raw_vars`; each must name a
    variable the config has. The overrides in force, returned."""
    for k in saved:
        if k not in raw_vars:
            raise ConfigError(overlay_path(file), f"no variable '{k}' under vars: in {file.name}"
                              + _did_you_mean(k, list(raw_vars) or ["(none)"])
                              + f"; remove it with: eagle3 set {file} --clear {k}", key=f"vars.{k}",
                              line=getattr(saved, "lines", {}).get(k))
    overrides = {**saved, **overrides}
    for k, v in overrides.items():
        if k not in raw_vars:
            raise ConfigError(file, f"--set {k}={v}: no variable '{k}' under vars:" + _did_you_mean(k, list(raw_vars) or ["(none)"]), key=f"vars.{k}")
        raw_vars[k] = v
    return overrides


def _phases(r: _Reader, phases_node: yaml.Node, resolve: Callable[[str], Path],
            validate_check: Callable[[str, Any], str | None]) -> list[Phase]:
    """Every phase, each `needs:` naming another phase, and no cycle among them."""
    phase_nodes = r.sequence(phases_node, "phases")
    if not phase_nodes:
        raise r.error(phases_node, "phases", "the list is empty; add at least one phase")
    phases: list[Phase] = []
    ids: dict[str, yaml.Node] = {}
    needs_nodes: dict[str, list[tuple[str, yaml.Node]]] = {}
    for i, pn in enumerate(phase_nodes):
        phase, needs = _phase(r, pn, i, resolve, validate_check, ids)
        phases.append(phase)
        needs_nodes[phase.id] = needs
        ids[phase.id] = pn

    for pid, needs in needs_nodes.items():
        for dep, dn in needs:
            if dep not in ids:
                raise r.error(dn, f"phases.{pid}.needs", f"unknown phase '{dep}'" + _did_you_mean(dep, list(ids)))
            if dep == pid:
                raise r.error(dn, f"phases.{pid}.needs", "a phase cannot need itself")
    _check_acyclic(r, phases, ids)
    return phases


def _fingerprint(text: str, overrides: dict[str, str]) -> str:
    """The config's text and the overrides in force: what a run was started with."""
    digest = hashlib.sha256(text.encode())
    for k in sorted(overrides):
        digest.update(f"\0{k}={overrides[k]}".encode())
    return digest.hexdigest()


def _python(r: _Reader, node: yaml.Node, key: str, resolve: Callable[[str], Path]) -> str:
    """A `python:` setting: a path (relative to the config folder, made absolute without
    following symlinks, since a venv's bin/python is one) or a bare name looked up on PATH.
    Whether it exists is a pre-flight check, not a load error: a config is often read on a
    machine that lacks the phase's environment."""
    text = r.string(node, key)
    if "/" not in text and not text.startswith("~"):
        if any(c.isspace() for c in text):
            raise r.error(node, key, f"'{text}' is not an interpreter: give the path of a python executable "
                                     "(options belong in run:)")
        return text
    return os.path.abspath(resolve(text))


def _phase(r: _Reader, node: yaml.Node, i: int, resolve: Callable[[str], Path],
           validate_check: Callable[[str, Any], str | None],
           ids: dict[str, yaml.Node]) -> tuple[Phase, list[tuple[str, yaml.Node]]]:
    entries = {k: (kn, vn) for k, kn, vn in r.mapping(node, f"phases[{i}]")}
    if "id" not in entries:
        raise r.error(node, f"phases[{i}]", "missing `id:` (a short name like merge or extract-hs)")
    pid = r.string(entries["id"][1], f"phases[{i}].id", interpolate=False)
    if not PHASE_ID.match(pid):
        raise r.error(entries["id"][1], f"phases[{i}].id",
                      f"'{pid}' is not a valid phase id: use lowercase letters, digits and '-'")
    if pid in ids:
        raise r.error(entries["id"][1], f"phases[{i}].id",
                      f"duplicate phase id '{pid}' (first on line {ids[pid].start_mark.line + 1})")
    key = f"phases.{pid}"
    for k, (kn, _) in entries.items():
        if k not in PHASE_KEYS:
            raise r.error(kn, f"{key}.{k}", "unknown phase key" + _did_you_mean(k, PHASE_KEYS))
    if "run" not in entries:
        raise r.error(node, f"{key}.run", "missing: the command to run, as a list or a string")
    argv = _command(r, entries["run"][1], f"{key}.run")

    env: dict[str, str] = {}
    if "env" in entries:
        for k, _kn, vn in r.mapping(entries["env"][1], f"{key}.env"):
            env[k] = r.string(vn, f"{key}.env.{k}", allow_empty=True, as_written=True)
    kind = "task"
    if "kind" in entries:
        kind = r.string(entries["kind"][1], f"{key}.kind")
        if kind not in ("task", "service"):
            raise r.error(entries["kind"][1], f"{key}.kind", f"'{kind}' is not a phase kind" + _did_you_mean(kind, ("task", "service")))
    needs: list[tuple[str, yaml.Node]] = []
    if "needs" in entries:
        for j, n in enumerate(r.sequence(entries["needs"][1], f"{key}.needs")):
            needs.append((r.string(n, f"{key}.needs[{j}]", interpolate=False), n))

    def checks(field: str) -> tuple[CheckSpec, ...]:
        if field not in entries:
            return ()
        fnode = entries[field][1]
        if isinstance(fnode, yaml.ScalarNode) and r.scalar(fnode, f"{key}.{field}") is None:
            return ()
        specs = [_check(r, cn, f"{key}.{field}[{j}]", validate_check)
                 for j, cn in enumerate(r.sequence(fnode, f"{key}.{field}"))]
        names: dict[str, int] = {}
        for j, s in enumerate(specs):
            if s.name in names:
                raise r.error(fnode.value[j], f"{key}.{field}[{j}]",
                              f"two checks are named '{s.name}'; give one a distinct `name:`")
            names[s.name] = j
        return tuple(specs)

    ready = checks("ready")
    if ready and kind != "service":
        raise r.error(entries["ready"][0], f"{key}.ready", "`ready:` is for `kind: service` phases")
    return Phase(
        id=pid,
        title=strip_controls(r.string(entries["title"][1], f"{key}.title")) if "title" in entries else pid,
        description=strip_controls(r.string(entries["description"][1], f"{key}.description", allow_empty=True))
        if "description" in entries else "",
        argv=tuple(argv),
        env=env,
        needs=tuple(d for d, _ in needs),
        checks=checks("checks"),
        verify=checks("verify"),
        ready=ready,
        inputs=tuple(resolve(p) for p in (r.string_list(entries["inputs"][1], f"{key}.inputs") if "inputs" in entries else [])),
        outputs=tuple(resolve(p) for p in (r.string_list(entries["outputs"][1], f"{key}.outputs") if "outputs" in entries else [])),
        deletes=tuple(resolve(p) for p in (r.string_list(entries["deletes"][1], f"{key}.deletes") if "deletes" in entries else [])),
        kind=kind,  # type: ignore[arg-type]
        confirm=r.boolean(entries["confirm"][1], f"{key}.confirm") if "confirm" in entries else False,
        line=node.start_mark.line + 1,
        python=_python(r, entries["python"][1], f"{key}.python", resolve) if "python" in entries else None,
        stall_after=_duration(r, entries["stall_after"][1], f"{key}.stall_after") if "stall_after" in entries else None,
        notify=_notify(r, entries["notify"][1], f"{key}.notify") if "notify" in entries else (),
    ), needs


def _duration(r: _Reader, node: yaml.Node, key: str) -> float:
    try:
        return parse_duration(r.scalar(node, key))
    except ValueError as e:
        raise r.error(node, key, str(e)) from None


def _parallel(r: _Reader, node: yaml.Node, key: str) -> int:
    """How many ready phases `eagle3 run --all` runs at once (its `--parallel` wins)."""
    value = r.scalar(node, key)
    if isinstance(value, str):
        value = r.interpolate(node, key, value).strip()
        value = int(value) if value.isdigit() else value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARALLEL:
        raise r.error(node, key, f"expected a whole number of phases from 1 to {MAX_PARALLEL}, got {value!r}")
    return value


NOTIFY_KEYS = ("run", "on", "timeout")


def _notify(r: _Reader, node: yaml.Node, key: str) -> tuple[NotifySpec, ...]:
    """`notify:` entries: `{run: CMD, on: [ended, failed, stalled, blocked], timeout: 30s}`,
    or just CMD (a list or a string split like a shell would) for every event."""
    out = []
    for j, en in enumerate(r.sequence(node, key)):
        ek = f"{key}[{j}]"
        fields: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        run_node = en
        if isinstance(en, yaml.MappingNode):
            # The key as written: YAML 1.1 reads a bare `on` as true.
            fields = {(kn.value if isinstance(kn, yaml.ScalarNode) else str(k)): (kn, vn)
                      for k, kn, vn in r.mapping(en, ek)}
            for k, (kn, _) in fields.items():
                if k not in NOTIFY_KEYS:
                    raise r.error(kn, f"{ek}.{k}", "unknown notify key" + _did_you_mean(k, NOTIFY_KEYS))
            if "run" not in fields:
                raise r.error(en, f"{ek}.run", "missing: the command to run, as a list or a string")
            run_node = fields["run"][1]
        argv = _command(r, run_node, f"{ek}.run")
        on: tuple[str, ...] = NOTIFY_EVENTS
        if "on" in fields:
            on_node = fields["on"][1]
            names = ([r.string(on_node, f"{ek}.on")] if isinstance(on_node, yaml.ScalarNode)
                     else r.string_list(on_node, f"{ek}.on"))
            for name in names:
                if name not in NOTIFY_EVENTS:
                    raise r.error(on_node, f"{ek}.on", f"'{name}' is not a notify event ({', '.join(NOTIFY_EVENTS)})"
                                  + _did_you_mean(name, NOTIFY_EVENTS))
            on = tuple(names)
        timeout = 30.0
        if "timeout" in fields:
            timeout = _duration(r, fields["timeout"][1], f"{ek}.timeout")
            if not 0 < timeout <= MAX_NOTIFY_TIMEOUT:
                raise r.error(fields["timeout"][1], f"{ek}.timeout", f"between 1s and {int(MAX_NOTIFY_TIMEOUT)}s")
        out.append(NotifySpec(argv=tuple(argv), on=on, timeout=timeout))
    return tuple(out)


def _check(r: _Reader, node: yaml.Node, key: str, validate_check: Callable[[str, Any], str | None]) -> CheckSpec:
    if isinstance(node, yaml.ScalarNode):
        raise r.error(node, key, f"a check is a mapping like `- exists: PATH`, got '{node.value}'")
    items = r.mapping(node, key)
    kinds = [(k, kn, vn) for k, kn, vn in items if k not in CHECK_META_KEYS]
    if not kinds:
        raise r.error(node, key, "no check kind given; use one of: " + ", ".join(KINDS))
    if len(kinds) > 1:
        names = ", ".join(k for k, _, _ in kinds)
        unknown = [k for k, _, _ in kinds if k not in KINDS]
        if unknown:
            k = unknown[0]
            kn = next(n for kk, n, _ in kinds if kk == k)
            raise r.error(kn, f"{key}.{k}", f"unknown check kind '{k}'" + _did_you_mean(k, KINDS))
        raise r.error(node, key, f"one check per entry, found {len(kinds)} kinds ({names}); split them into separate `- ` items")
    kind, kn, vn = kinds[0]
    if kind not in KINDS:
        raise r.error(kn, f"{key}.{kind}", f"unknown check kind '{kind}'" + _did_you_mean(kind, KINDS))
    base = re.escape(f"{key}.{kind}")
    command_at = re.compile(base + (r"(\.argv)?" if kind == "command" else r"\.values\.[^.]+\.command")).fullmatch
    arg = r.plain(vn, f"{key}.{kind}", lambda k: command_at(k) is not None)
    problem = validate_check(kind, arg)
    if problem:
        raise r.error(vn, f"{key}.{kind}", problem)
    meta = {k: (kkn, vvn) for k, kkn, vvn in items if k in CHECK_META_KEYS}
    severity = "error"
    if "severity" in meta:
        severity = r.string(meta["severity"][1], f"{key}.severity")
        if severity not in ("error", "warning"):
            raise r.error(meta["severity"][1], f"{key}.severity",
                          f"'{severity}' is not a severity" + _did_you_mean(severity, ("error", "warning")))
    name = strip_controls(r.string(meta["name"][1], f"{key}.name") if "name" in meta else default_name(kind, arg))
    return CheckSpec(kind=kind, arg=arg, name=name, severity=severity,  # type: ignore[arg-type]
                     file=str(r.file), line=node.start_mark.line + 1)


def _check_acyclic(r: _Reader, phases: list[Phase], ids: dict[str, yaml.Node]) -> None:
    graph = {p.id: p.needs for p in phases}
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        color[n] = 1
        stack.append(n)
        for d in graph[n]:
            if color.get(d) == 1:
                cycle = " -> ".join(stack[stack.index(d):] + [d])
                raise r.error(ids[n], f"phases.{n}.needs", f"needs form a cycle: {cycle}")
            if d not in color:
                visit(d)
        stack.pop()
        color[n] = 2

    for p in phases:
        if p.id not in color:
            visit(p.id)
