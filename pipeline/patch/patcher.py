"""Applying, verifying and reverting the recipes on a file's bytes (no SGLang needed)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.atomicfile import write_bytes_atomic
from pipeline.patch.recipes import RECIPES, Recipe, supported

BACKUP_SUFFIX = ".eagle3-orig"
MAX_FILE_BYTES = 16 * 2**20  # SGLang's largest model file is ~200 KB

EXIT_OK, EXIT_NOT_PATCHED, EXIT_USAGE, EXIT_REFUSED, EXIT_WRITE = 0, 1, 2, 3, 4


class PatchError(Exception):
    """A failure with its exit code; str() is the one line the operator reads."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patched_text(recipe: Recipe, original: bytes) -> bytes:
    out = original
    for ins in recipe.insertions:
        anchor = ins.anchor.encode()
        if out.count(anchor) != 1:
            raise ValueError(f"anchor {ins.anchor.strip()!r} occurs {out.count(anchor)} times")
        out = out.replace(anchor, anchor + ins.block.encode(), 1)
    return out


def original_text(recipe: Recipe, patched: bytes) -> bytes | None:
    """The original a patched text was made from, or None when it is not this recipe's."""
    out = patched
    for ins in recipe.insertions:
        whole = (ins.anchor + ins.block).encode()
        if out.count(whole) != 1:
            return None
        out = out.replace(whole, ins.anchor.encode(), 1)
    return out


@dataclass(frozen=True)
class State:
    """What a file holds: 'original', 'patched' or 'unknown', and for the first two the
    recipe and the original bytes."""

    kind: str
    recipe: Recipe | None = None
    original: bytes | None = None

    def describe(self, path: Path) -> str:
        if self.recipe is None:
            return f"unknown {path}: not a file this patcher supports; supported: {supported()}"
        return f"{self.kind} {self.recipe.label()} {path}"


def classify(data: bytes) -> State:
    digest = sha256(data)
    for recipe in RECIPES:
        if digest == recipe.original_sha256:
            return State("original", recipe, data)
    for recipe in RECIPES:
        original = original_text(recipe, data)
        if original is not None and sha256(original) == recipe.original_sha256 \
                and patched_text(recipe, original) == data:
            return State("patched", recipe, original)
    return State("unknown")


def module_file(name: str) -> Path:
    """The source file `import name` would load, found without importing any package of it."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        raise PatchError(f"--module {name!r} is not a dotted module name like sglang.srt.models.llama", EXIT_USAGE)
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError) as e:
        raise PatchError(f"--module {name}: {e}", EXIT_USAGE) from None
    for i in range(1, len(parts)):
        if spec is None:
            break
        if spec.submodule_search_locations is None:
            raise PatchError(f"--module {name}: {'.'.join(parts[:i])} is a module, not a package", EXIT_USAGE)
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(spec.submodule_search_locations))
    if spec is None or not spec.has_location or not spec.origin or not spec.origin.endswith(".py"):
        raise PatchError(f"--module {name} cannot be found as a .py file by this Python ({sys.executable}): "
                         "run the patcher with the SGLang environment's interpreter, or give --file", EXIT_USAGE)
    return Path(spec.origin)


def read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise PatchError(f"{path} is {size} bytes, larger than any SGLang model file "
                             f"({MAX_FILE_BYTES} bytes at most): is it the right file?", EXIT_REFUSED)
        return path.read_bytes()
    except FileNotFoundError:
        raise PatchError(f"{path} does not exist", EXIT_USAGE) from None
    except IsADirectoryError:
        raise PatchError(f"{path} is a folder; give the model's .py file", EXIT_USAGE) from None
    except OSError as e:
        raise PatchError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE) from None


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _write(path: Path, data: bytes, mode: int | None) -> None:
    try:
        write_bytes_atomic(path, data)
        if mode is not None:
            os.chmod(path, mode)
    except OSError as e:
        raise PatchError(f"cannot write {path}: {e.strerror or e}", EXIT_WRITE) from None


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def status(path: Path) -> State:
    return classify(read(path))


def apply(path: Path) -> str:
    data = read(path)
    state = classify(data)
    if state.kind == "patched":
        return f"already patched: {state.recipe.label()} {path}"
    if state.kind == "unknown":
        raise PatchError(f"refusing to patch {path}: its content (sha256 {sha256(data)[:12]}…) is not an original "
                         f"this patcher knows, nor its patched form; supported: {supported()}", EXIT_REFUSED)
    backup = backup_path(path)
    mode = _mode(path)
    _write(backup, data, mode)
    _write(path, patched_text(state.recipe, data), mode)
    return f"patched {state.recipe.label()} {path} (original kept as {backup})"


def verify(path: Path) -> tuple[bool, str]:
    state = status(path)
    return state.kind == "patched", state.describe(path)


def revert(path: Path) -> str:
    data = read(path)
    state = classify(data)
    backup = backup_path(path)
    if state.kind == "original":
        _drop_backup(backup, data)
        return f"already original: {state.recipe.label()} {path}"
    if state.kind == "unknown":
        hint = ""
        if backup.exists():
            hint = (f"; the original is kept in {backup}: copy it back by hand if the changes made to "
                    f"{path.name} since it was patched can go")
        raise PatchError(f"refusing to revert {path}: it is neither a supported original nor exactly its patched "
                         f"form (edited by hand?){hint}", EXIT_REFUSED)
    _write(path, state.original, _mode(path))
    _drop_backup(backup, state.original)
    return f"reverted {state.recipe.label()} {path} to its original"


def _drop_backup(backup: Path, original: bytes) -> None:
    """Remove the backup once the file is the original again (only if it holds that original)."""
    try:
        if backup.read_bytes() == original:
            backup.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise PatchError(f"cannot remove the backup {backup}: {e.strerror or e}", EXIT_WRITE) from None
