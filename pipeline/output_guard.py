"""The one rule for every stage that writes an output folder (export, the demo assets,
checkpoints) or an output file (merge, regenerate: `refuse_overlap` and `refuse_foreign_file`).

A writer replaces only a folder it wrote itself, recognised by the marker file it leaves
inside (`.eagle3-writer`, naming the writer). An existing `--out` without that marker, a
file where a folder should be, or an `--out` that is, holds or sits inside an input is
refused before anything is touched: an operator's slip must cost an error message, never a
target model or a training run. The new folder is built under a temporary name and swapped
in with one atomic exchange (Linux `renameat2(RENAME_EXCHANGE)`), so there is no moment
without a folder; the temporary is removed on any failure, and a full disk becomes
`OutOfSpace` (exit 3) naming the volume and the bytes needed.

Torch-free and console-free, so any stage can use it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.atomic_io import fsync_dir, write_bytes_atomic

from pipeline.sizes import format_bytes
from pipeline.process_alive import pid_alive
from pipeline.program_edge import BadInput, OutOfSpace  # the edge's: a refusal exits 2, a full disk 3

MARKER = ".eagle3-writer"
MAX_MARKER_BYTES = 4096
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What libraries print instead of raising OSError: safetensors (Rust io::Error), torch's zip writer.
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")


def _real(p: Path) -> Path:
    return Path(os.path.realpath(os.path.abspath(p)))


def refuse_overlap(out: Path, inputs: Iterable[Path], flag: str = "--out") -> None:
    """BadInput when `out` equals, sits inside or contains any of `inputs` (symlinks resolved)."""
    o = _real(out)
    for given in inputs:
        if given is None:
            continue
        i = _real(given)
        if o == i:
            why = "is"
        elif o.is_relative_to(i):
            why = "sits inside"
        elif i.is_relative_to(o):
            why = "contains"
        else:
            continue
        raise BadInput(f"{flag} {out} {why} the input {given}; writing there would destroy what this stage "
                       f"reads: pass a {flag} folder outside it")


def refuse_foreign_file(out: Path, stats: Path, keys: Iterable[str], writer: str, flag: str = "--out") -> None:
    """BadInput when `out` is a non-empty file that `writer` did not write. A stage that
    replaces (merge) or resumes and appends to (regenerate) its output file keeps a stats file
    beside it; an `out` whose stats file is missing or lacks the writer's `keys` is somebody
    else's file, and is left exactly as it is."""
    try:
        if out.stat().st_size == 0:
            return
    except FileNotFoundError:
        return
    try:
        with open(stats, "rb") as f:
            obj = json.loads(f.read(1 << 24))
    except (OSError, ValueError):
        obj = None
    if isinstance(obj, dict) and all(k in obj for k in keys):
        return
    raise BadInput(f"{flag} {out} exists and was not written by {writer} (no {writer} stats at {stats}); "
                   f"nothing was touched: pass another {flag}, or remove that file if it is yours to lose")


def writer_of(folder: Path) -> str | None:
    """The writer named by `folder`'s marker, or None when it has none (or an unreadable one)."""
    try:
        with open(Path(folder) / MARKER, "rb") as f:
            obj = json.loads(f.read(MAX_MARKER_BYTES))
    except (OSError, ValueError):
        return None
    w = obj.get("writer") if isinstance(obj, dict) else None
    return w if isinstance(w, str) else None


def mark(folder: Path, writer: str) -> None:
    write_bytes_atomic(Path(folder) / MARKER, (json.dumps({"writer": writer}) + "\n").encode())


def refuse_foreign(out: Path, writer: str, flag: str = "--out") -> None:
    """BadInput unless `out` is absent, an empty folder, or a folder `writer` marked as its own."""
    out = Path(out)
    if not os.path.lexists(out):
        return
    if out.is_symlink() or not out.is_dir():
        kind = "a symlink" if out.is_symlink() else "a file"
        raise BadInput(f"{flag} {out} exists and is {kind}, not a folder {writer} wrote; pass a new folder path")
    if not any(out.iterdir()) or writer_of(out) == writer:
        return
    other = writer_of(out)
    whose = f"was written by {other}" if other else f"has no {MARKER} marker of {writer}"
    raise BadInput(f"{flag} {out} exists and {whose}; {writer} replaces only folders it wrote itself: "
                   "pass a new folder, or move that one away yourself")


def volume_of(path: Path) -> str:
    """The mount point holding `path`: the name an operator recognises in `df`."""
    p = Path(os.path.abspath(path))
    while not p.exists():
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return str(p)


def is_disk_full(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
        return True
    text = str(e)
    return any(t in text for t in _DISK_FULL_TEXT)


def out_of_space(e: BaseException, doing: str, where: Path, need: int | None) -> OutOfSpace:
    vol = volume_of(where)
    try:
        free = shutil.disk_usage(vol).free
    except OSError:
        free = None
    needs = f"needs about {format_bytes(need)} ({need} bytes)" if need else "needs more room"
    has = f", {format_bytes(free)} free" if free is not None else ""
    return OutOfSpace(f"the disk is full on {vol} while {doing} ({where}): {needs}{has}; nothing half-written was "
                      "left behind and the previous output is unchanged; free space there and rerun")


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def swap_folder_in(tmp: Path, final: Path) -> None:
    """Put the finished folder `tmp` at `final`. An existing folder there is exchanged with it
    atomically (a reader or a kill sees the old folder or the new one, never none) and then
    deleted. `final` must be a folder or absent: a file is never hidden or replaced."""
    tmp, final = Path(tmp), Path(final)
    if os.path.lexists(final) and (final.is_symlink() or not final.is_dir()):
        raise BadInput(f"{final} exists and is not a folder; refusing to replace it")
    if not os.path.lexists(final):
        os.rename(tmp, final)
    elif _exchange(tmp, final):
        shutil.rmtree(tmp)
    else:
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old)
    fsync_dir(final.parent)


def temp_for(final: Path) -> Path:
    final = Path(final)
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


def sweep_stale(final: Path) -> list[Path]:
    """Remove the temporaries (`.NAME.tmp-<pid>`, `.NAME.old-<pid>`) that a writer killed
    outright (SIGKILL, a power cut) left beside `final`; those of a live process stay."""
    final = Path(final)
    removed = []
    for kind in ("tmp", "old"):
        for p in final.parent.glob(f".{final.name}.{kind}-*"):
            pid = p.name.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)) and p.is_dir() \
                    and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


@contextmanager
def staged_folder(final: Path, writer: str | None, doing: str, need: int | None = None) -> Iterator[Path]:
    """A fresh temporary folder beside `final` to build in; on success it gets `writer`'s
    marker and replaces `final` (which must be absent, empty or `writer`'s: check with
    `refuse_foreign` first, before any work). On any failure the temporary is removed, and a
    full disk becomes OutOfSpace; temporaries of a writer killed outright are swept first."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(final)
    tmp = temp_for(final)
    if os.path.lexists(tmp):
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        yield tmp
        if writer is not None:
            mark(tmp, writer)
            refuse_foreign(final, writer)  # again: another process may have put something there meanwhile
        swap_folder_in(tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e):
            raise out_of_space(e, doing, final, need) from None
        raise
