"""What a phase read and wrote when it finished, so the console can tell later whether
its outputs (or its inputs) have changed since: DVC's lock record, one per phase.

A record lives at `<state>/provenance/<phase>.json`. Fingerprints are content-based
where that is cheap (sha256 of files up to 64 MiB) and metadata-based where it is not
(first and last MiB plus size for bigger files; relpath, size and mtime of every file
for folders), so a multi-GB dataset or a folder of a million tensors is fingerprinted
in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from console.core.files.atomicfile import atomic_write_json
from console.core.model.config import Config, Phase
from console.core.text.redaction import Redactor, redactor_for
from pipeline.sizes import format_bytes

FULL_HASH_LIMIT = 64 * 2**20
PARTIAL_CHUNK = 2**20


def _file_hash(path: Path, size: int) -> tuple[str, bool]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_HASH_LIMIT:
            for block in iter(lambda: f.read(2**20), b""):
                h.update(block)
            return h.hexdigest(), False
        h.update(f.read(PARTIAL_CHUNK))
        f.seek(size - PARTIAL_CHUNK)
        h.update(f.read(PARTIAL_CHUNK))
        h.update(str(size).encode())
        return h.hexdigest(), True


def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON-able summary of a file or folder that changes when its content does."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return {"exists": False}
    except OSError as e:
        return {"exists": False, "error": f"{type(e).__name__}: {e.strerror or e}"}
    if p.is_dir():
        return _dir_fingerprint(p)
    digest, partial = _file_hash(p, st.st_size)
    fp: dict[str, Any] = {"exists": True, "type": "file", "size": st.st_size,
                          "mtime_ns": st.st_mtime_ns, "sha256": digest}
    if partial:
        fp["partial"] = True
    return fp


def _dir_fingerprint(root: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    files = 0
    total = 0
    newest = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            rel = os.path.relpath(full, root)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
            files += 1
            total += st.st_size
            newest = max(newest, st.st_mtime_ns)
    return {"exists": True, "type": "dir", "files": files, "size": total,
            "newest_mtime_ns": newest, "tree_sha256": h.hexdigest()}


def _when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def compare(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """A short reason the fingerprint changed, or None when it did not."""
    if not old.get("exists"):
        return "created since" if new.get("exists") else None
    if not new.get("exists"):
        return "deleted" + (f" ({new['error']})" if new.get("error") else "")
    if old.get("type") != new.get("type"):
        return f"was a {old.get('type')}, now a {new.get('type')}"
    if old["type"] == "dir":
        why = []
        if old.get("files") != new.get("files"):
            why.append(f"files {old.get('files')} -> {new.get('files')}")
        if old.get("size") != new.get("size"):
            why.append(f"size {format_bytes(old.get('size', 0))} -> {format_bytes(new.get('size', 0))}")
        if not why and old.get("tree_sha256") != new.get("tree_sha256"):
            newest = new.get("newest_mtime_ns") or 0
            why.append(f"files modified (newest {_when(newest)})")
        return ", ".join(why) or None
    if old.get("size") != new.get("size"):
        return f"size {format_bytes(old.get('size', 0))} -> {format_bytes(new.get('size', 0))}"
    if old.get("sha256") != new.get("sha256"):
        return f"content changed (modified {_when(new.get('mtime_ns', 0))})"
    if new.get("partial") and old.get("mtime_ns") != new.get("mtime_ns"):
        # Only the head and tail were hashed: a new mtime may hide a change in between.
        return f"modified {_when(new.get('mtime_ns', 0))} (large file: only its size, head and tail compared)"
    return None


def record_path(state_dir: str | os.PathLike[str], phase_id: str) -> Path:
    return Path(state_dir) / "provenance" / f"{phase_id}.json"


def _key(config: Config, p: str | os.PathLike[str]) -> str:
    """How a path is stored: relative to the config's folder when inside it (a moved or
    copied project then checks its own files), absolute otherwise."""
    full = os.path.abspath(config.resolve(p))
    rel = os.path.relpath(full, os.path.abspath(config.root))
    return full if rel == ".." or rel.startswith(".." + os.sep) else rel


def record_phase(config: Config, phase: Phase, run_id: str) -> dict[str, Any]:
    """Fingerprint the phase's inputs and outputs now and store the record atomically
    (paths relative to the config's folder, `${env:...}` values redacted: the record names
    the variable instead). Returns it as `read_record` will give it back."""
    redactor = redactor_for(config)
    record: dict[str, Any] = {
        "phase": phase.id,
        "run_id": run_id,
        "argv": list(phase.argv),
        "config": str(config.path),
        "root": str(config.root),
        "state_dir": str(config.state_dir),
        "config_fingerprint": config.fingerprint,
        "inputs": {_key(config, p): fingerprint(config.resolve(p)) for p in phase.inputs},
        "outputs": {_key(config, p): fingerprint(config.resolve(p)) for p in phase.outputs},
        "finished_at": time.time(),
        "secret_env": list(redactor.names),
    }
    atomic_write_json(record_path(config.state_dir, phase.id), redactor.obj(record))
    for role in ("inputs", "outputs"):  # returned as read_record gives it: absolute paths
        record[role] = {str(config.root / k) if not os.path.isabs(k) else k: v for k, v in record[role].items()}
    return record


def _root_now(record: dict[str, Any], state_dir: Path) -> Path | None:
    """The config folder the record's relative paths mean today: where it was, unless the
    state dir that holds the record moved with it (a moved or copied project)."""
    root, then = record.get("root"), record.get("state_dir")
    if not isinstance(root, str):
        return None
    if (isinstance(then, str) and os.path.abspath(then) != os.path.abspath(state_dir)
            and os.path.abspath(then).startswith(os.path.abspath(root) + os.sep)):
        rel = os.path.relpath(root, then)
        return Path(os.path.normpath(os.path.join(os.path.abspath(state_dir), rel)))
    return Path(root)


def read_record(state_dir: str | os.PathLike[str], phase_id: str) -> dict[str, Any] | None:
    """The phase's record, or None when it never finished (or the record is unreadable).
    Paths come back absolute, for where the project is now, and `${env:...}` references
    hold their values again (in memory only)."""
    try:
        data = json.loads(record_path(state_dir, phase_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data = Redactor(data.get("secret_env") or ()).restore(data)
    root = _root_now(data, Path(state_dir))
    if root is not None:
        for role in ("inputs", "outputs"):
            paths = data.get(role)
            if isinstance(paths, dict):
                data[role] = {(k if os.path.isabs(k) else str(root / k)): v for k, v in paths.items()}
        data["root"] = str(root)
    return data


def changed_paths(record: dict[str, Any]) -> list[str]:
    """'output /data/train.jsonl: size 1.2 GB -> 1.3 GB' for each path that changed."""
    out = []
    for role in ("inputs", "outputs"):
        for path, old in (record.get(role) or {}).items():
            why = compare(old, fingerprint(path))
            if why:
                out.append(f"{role[:-1]} {path}: {why}")
    return out
