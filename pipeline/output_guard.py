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

An output file is opened once, without following a symlink (`open_output`), and worked on
through that descriptor; before writing, `refuse_replaced` checks that the path still names
it. A `--stats` path is rewritten only when it holds the writer's own stats
(`refuse_foreign_stats`): a rerun rewrites its own, never an operator's file.

Torch-free and console-free, so any stage can use it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, overload

from pipeline.atomic_io import fsync_dir, write_bytes_atomic
from pipeline.process_alive import pid_alive
from pipeline.program_edge import BadInput, OutOfSpace  # the edge's: a refusal exits 2, a full disk 3
from pipeline.sizes import format_bytes

MARKER = ".eagle3-writer"
MAX_MARKER_BYTES = 4096
MAX_STATS_BYTES = 1 << 24  # a stage's stats file; a larger one is not a stage's
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


def _own_json(path: Path, keys: Iterable[str]) -> bool:
    """`path` is a regular file (not a link, a FIFO or a device) holding a JSON object with
    every one of `keys`, read without following a link and at most MAX_STATS_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(MAX_STATS_BYTES + 1)
        obj = json.loads(raw) if len(raw) <= MAX_STATS_BYTES else None
    except (OSError, ValueError, RecursionError):
        return False
    finally:
        os.close(fd)
    return isinstance(obj, dict) and all(k in obj for k in keys)


def refuse_foreign_file(out: Path, stats: Path, keys: Iterable[str], writer: str, flag: str = "--out") -> None:
    """BadInput when `out` is a non-empty file that `writer` did not write. A stage that
    replaces (merge) or resumes and appends to (regenerate) its output file keeps a stats file
    beside it; an `out` whose stats file is missing or lacks the writer's `keys` is somebody
    else's file, and is left exactly as it is."""
    try:
        if os.lstat(out).st_size == 0 and not out.is_symlink():
            return
    except FileNotFoundError:
        return
    if _own_json(stats, keys):
        return
    raise BadInput(f"{flag} {out} exists and was not written by {writer} (no {writer} stats at {stats}); "
                   f"nothing was touched: pass another {flag}, or remove that file if it is yours to lose")


def refuse_foreign_stats(stats: Path, keys: Iterable[str], writer: str, flag: str = "--stats") -> None:
    """BadInput when `stats` exists and is not a stats file `writer` wrote (a JSON object with
    its `keys`): a rerun or a resume rewrites its own stats, never an operator's file."""
    if not os.path.lexists(stats) or _own_json(stats, keys):
        return
    raise BadInput(f"{flag} {stats} exists and is not {writer}'s stats (a {writer} stats file holds "
                   f"{', '.join(keys)}); nothing was touched: pass another {flag}, or remove that file if it is "
                   "yours to lose")


@overload
def open_output(path: Path, create: Literal[True], flag: str = "--out") -> int: ...
@overload
def open_output(path: Path, create: bool, flag: str = "--out") -> int | None: ...
def open_output(path: Path, create: bool, flag: str = "--out") -> int | None:
    """The output file, opened once to read, cut and append to, never through a symlink;
    None when it is absent and `create` is false. A created file must be new (O_EXCL): one that
    appeared meanwhile is somebody else's. The caller works on the descriptor from then on and
    calls `refuse_replaced` before it writes, so a path swapped while it waited is never touched."""
    flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
    except FileNotFoundError:
        if create:
            raise
        return None
    except FileExistsError:
        raise BadInput(f"{flag} {path} appeared while this stage was starting; another writer is at work there: "
                       "nothing was touched; rerun when it is done, or pass another path") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadInput(f"{flag} {path} is a symlink; a stage writes only the file it names, never through a "
                           "link: pass the file's own path") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{flag} {path} is not a regular file (a FIFO, a device or a socket); pass a file path")
    os.set_blocking(fd, True)
    return fd


def refuse_replaced(fd: int, path: Path, flag: str = "--out") -> None:
    """BadInput when `path` no longer names the file open on `fd`: it was moved, removed or
    swapped (for a symlink to an input, say) after this stage opened it."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        now = None
    held = os.fstat(fd)
    if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
        return
    what = "removed" if now is None else "a symlink" if stat.S_ISLNK(now.st_mode) else "another file"
    raise BadInput(f"{flag} {path} changed while this stage waited: it is now {what}, not the file it opened; "
                   "nothing was written through it: put the output back (or pass another path) and rerun")


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
