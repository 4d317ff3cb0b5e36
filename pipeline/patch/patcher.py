"""Applying, verifying and reverting the recipes on a file's bytes (no SGLang needed).

A symlinked model file (an environment assembled with links) is followed: the patch, the
backup and the lock go to the file it points to, and the link stays a link. Applies and
reverts of one file are serialised by an flock on `.<file>.eagle3-lock` beside it, so
concurrent runs (eight ranks' launch scripts) all succeed: one patches, the others find it
patched. The backup must hold the recorded original (its sha256 in recipes.py); one that
does not is refused, naming the command that repairs it, because a later revert by hand
would copy back whatever it holds.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.atomic_io import write_bytes_atomic
from pipeline.patch.recipes import RECIPES, Insertion, Recipe, supported
from pipeline.program_edge import REFUSED, WRITE_FAILED, BadInput, StageError

BACKUP_SUFFIX = ".eagle3-orig"
LOCK_SUFFIX = ".eagle3-lock"
LOCK_WAIT_S = 60.0
MAX_FILE_BYTES = 16 * 2**20  # SGLang's largest model file is ~200 KB

EXIT_OK, EXIT_NOT_PATCHED = 0, 1  # verify's answers; a failure exits with its class's code


class PatchError(StageError):
    """A failure of the patcher; str() is the one line the operator reads. Bad arguments and
    files that cannot be found or read are the edge's BadInput (exit 2)."""


class Refused(PatchError):
    """Content this patcher does not know, or a backup that is not the original."""

    exit_code = REFUSED


class WriteFailed(PatchError):
    """The file, its backup or its lock cannot be written (or the lock stays held)."""

    exit_code = WRITE_FAILED


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patched_text(recipe: Recipe, original: bytes) -> bytes:
    return _inserted(recipe.insertions, original)


def _inserted(insertions: tuple[Insertion, ...], original: bytes) -> bytes:
    out = original
    for ins in insertions:
        anchor = ins.anchor.encode()
        if out.count(anchor) != 1:
            raise ValueError(f"anchor {ins.anchor.strip()!r} occurs {out.count(anchor)} times")
        out = out.replace(anchor, anchor + ins.block.encode(), 1)
    return out


def original_text(recipe: Recipe, patched: bytes) -> bytes | None:
    """The original a patched text was made from, or None when it is not this recipe's."""
    return _removed(recipe.insertions, patched)


def _removed(insertions: tuple[Insertion, ...], patched: bytes) -> bytes | None:
    out = patched
    for ins in insertions:
        whole = (ins.anchor + ins.block).encode()
        if out.count(whole) != 1:
            return None
        out = out.replace(whole, ins.anchor.encode(), 1)
    return out


@dataclass(frozen=True)
class State:
    """What a file holds: 'original', 'patched', 'outdated' (patched by an earlier release) or
    'unknown', and but for the last the recipe and the original bytes."""

    kind: str
    recipe: Recipe | None = None
    original: bytes | None = None

    def describe(self, path: Path) -> str:
        if self.recipe is None:
            return f"unknown {path}: not a file this patcher supports; supported: {supported()}"
        if self.kind == "outdated":
            return (f"outdated {self.recipe.label()} {path}: patched by an earlier release, whose hook this "
                    f"server cannot import; patch it anew: python -m pipeline.patch apply --file {path}")
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
    for recipe in RECIPES:
        for earlier in recipe.earlier:
            original = _removed(earlier, data)
            if original is not None and sha256(original) == recipe.original_sha256 \
                    and _inserted(earlier, original) == data:
                return State("outdated", recipe, original)
    return State("unknown")


def module_file(name: str) -> Path:
    """The source file `import name` would load, found without importing any package of it
    (`name` is dotted: Options.validate refuses any other)."""
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError) as e:
        raise BadInput(f"--module {name}: {e}") from None
    for i in range(1, len(parts)):
        if spec is None:
            break
        if spec.submodule_search_locations is None:
            raise BadInput(f"--module {name}: {'.'.join(parts[:i])} is a module, not a package")
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(spec.submodule_search_locations))
    if spec is None or not spec.has_location or not spec.origin or not spec.origin.endswith(".py"):
        raise BadInput(f"--module {name} cannot be found as a .py file by this Python ({sys.executable}): "
                       "run the patcher with the SGLang environment's interpreter, or give --file")
    return Path(spec.origin)


def read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise Refused(f"{path} is {size} bytes, larger than any SGLang model file "
                          f"({MAX_FILE_BYTES} bytes at most): is it the right file?")
        return path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path} does not exist") from None
    except IsADirectoryError:
        raise BadInput(f"{path} is a folder; give the model's .py file") from None
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror or e}") from None


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def real_file(path: Path) -> Path:
    """The file a (chain of) symlink(s) names; the path itself when it is none."""
    return Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)


def _shown(path: Path, real: Path) -> str:
    return f"{path} -> {real}" if real != path else str(path)


@contextmanager
def file_lock(real: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """An exclusive flock on `.<name>.eagle3-lock` beside the file, waited for at most `wait_s`."""
    lock = real.with_name(f".{real.name}{LOCK_SUFFIX}")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise WriteFailed(f"cannot create the lock {lock}: {e.strerror or e}") from None
    try:
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not said:  # a silent wait of up to a minute reads as a hang
                    print(f"{real} is being patched by another process; waiting up to {wait_s:.0f} s for {lock}",
                          file=sys.stderr, flush=True)
                    said = True
                if time.monotonic() > deadline:
                    raise WriteFailed(f"{real} is being patched by another process (lock {lock} held for "
                                      f"{wait_s:.0f} s); wait for it and retry") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _backup_problem(backup: Path, recipe: Recipe) -> str | None:
    """Why the backup cannot be trusted as the original (None: absent, or it is the original)."""
    try:
        data = backup.read_bytes() if backup.is_file() else None
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if data is None:  # absent, or a folder in its way: writing it fails with exit 4
        return None
    digest = sha256(data)
    if digest != recipe.original_sha256:
        return (f"has sha256 {digest[:12]}…, not the recorded original's {recipe.original_sha256[:12]}… "
                "(changed since the patch was applied)")
    return None


def _write(path: Path, data: bytes, mode: int | None) -> None:
    try:
        write_bytes_atomic(path, data, tag=f".{os.getpid()}")
        if mode is not None:
            os.chmod(path, mode)
    except OSError as e:
        raise WriteFailed(f"cannot write {path}: {e.strerror or e}") from None


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def status(path: Path) -> State:
    return classify(read(real_file(path)))


def apply(path: Path) -> str:
    real = real_file(path)
    shown = _shown(path, real)
    read(real)  # before the lock: a missing file or a folder leaves no lock file behind
    with file_lock(real):
        data = read(real)
        state = classify(data)
        backup = backup_path(real)
        if state.recipe is None or state.original is None:  # unknown
            raise Refused(f"refusing to patch {shown}: its content (sha256 {sha256(data)[:12]}…) is not an "
                          f"original this patcher knows, nor its patched form; supported: {supported()}")
        problem = _backup_problem(backup, state.recipe)
        if problem:
            raise Refused(f"refusing to patch {shown}: its backup {backup} {problem}; {shown} itself is "
                          f"{state.kind}, so the backup can go: rm {backup} && python -m pipeline.patch apply "
                          f"--file {path}")
        if state.kind == "patched":
            return f"already patched: {state.recipe.label()} {shown}"
        mode = _mode(real)
        if state.kind == "original" or not backup.is_file():
            _write(backup, state.original, mode)
        _write(real, patched_text(state.recipe, state.original), mode)
    return f"patched {state.recipe.label()} {shown} (original kept as {backup})"


def verify(path: Path) -> tuple[bool, str]:
    state = status(path)
    return state.kind == "patched", state.describe(path)


def revert(path: Path) -> str:
    real = real_file(path)
    shown = _shown(path, real)
    read(real)  # before the lock, as apply
    with file_lock(real):
        data = read(real)
        state = classify(data)
        backup = backup_path(real)
        if state.recipe is None or state.original is None:  # unknown
            raise Refused(f"refusing to revert {shown}: it is neither a supported original nor exactly its "
                          f"patched form (edited by hand?){_unknown_hint(real, backup)}")
        problem = _backup_problem(backup, state.recipe)
        if problem:
            rebuilt = "the original is rebuilt from the patched text" if state.kind != "original" else \
                f"{shown} is already the original"
            raise Refused(f"refusing to revert {shown}: its backup {backup} {problem}; {rebuilt}, so the backup "
                          f"can go: rm {backup} && python -m pipeline.patch revert --file {path}")
        if state.kind == "original":
            _drop_backup(backup, data)
            return f"already original: {state.recipe.label()} {shown}"
        _write(real, state.original, _mode(real))
        _drop_backup(backup, state.original)
    return f"reverted {state.recipe.label()} {shown} to its original"


def _unknown_hint(real: Path, backup: Path) -> str:
    """What to do with a file this patcher no longer recognises, depending on its backup."""
    if not backup.is_file():
        return ""
    try:
        digest = sha256(backup.read_bytes())
    except OSError:
        return ""
    if any(digest == r.original_sha256 for r in RECIPES):
        return (f"; the original is kept in {backup}: copy it back by hand if the changes made to "
                f"{real.name} since it was patched can go (cp {backup} {real})")
    return (f"; its backup {backup} is not a supported original either (sha256 {digest[:12]}…): do not copy it "
            "back; reinstall SGLang's file (pip install --force-reinstall --no-deps sglang==<version>)")


def _drop_backup(backup: Path, original: bytes) -> None:
    """Remove the backup once the file is the original again (only if it holds that original)."""
    try:
        if backup.read_bytes() == original:
            backup.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise WriteFailed(f"cannot remove the backup {backup}: {e.strerror or e}") from None
