"""Remembered overrides: the variables an operator set with `eagle3 set CONFIG VAR=VALUE`,
kept in `<config stem>.local.yaml` beside the config and applied under `--set` by every
command and the console, so that status, staleness and `run --all` use the operator's
values without repeating `--set` forever.

Beside the config, not in the state dir: the state dir is itself made of variables
(`state_dir: ${workdir}/state`) that the overlay may set, so it cannot be where the overlay
is found. One overlay per config file, whoever runs it from wherever.

The file is small YAML (`vars:` and nothing else), bounded (64 KB, 256 names, 4 KB a value)
and validated like a config: a name the config does not define is an error naming the file,
the line and the key, with a did-you-mean and the command that removes it."""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from console.core.config.composer import compose, restore
from console.core.text.errors import ConfigError
from pipeline import bounded_read
from pipeline.atomic_io import fsync_dir, write_bytes_atomic

SUFFIX = ".local.yaml"
MAX_BYTES = 64 * 1024
MAX_NAMES = 256
MAX_VALUE = 4096
VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
HEADER = ("# Overrides remembered by `eagle3 set` for {config}; applied under --set by every command.\n"
          "# Change them with `eagle3 set {config} VAR=VALUE` or `--clear VAR`.\n")


class Saved(dict[str, str]):
    """The remembered variables, with the line each was read from (for errors)."""

    lines: dict[str, int]

    def __init__(self, *a: object, **kw: str) -> None:
        super().__init__(*a, **kw)
        self.lines = {}


def overlay_path(config_path: str | os.PathLike[str]) -> Path:
    p = Path(config_path)
    return p.with_name(p.stem + SUFFIX)


@contextmanager
def overlay_lock(config_path: str | os.PathLike[str]) -> Iterator[None]:
    """Held by `eagle3 set` from reading the overlay to writing it back, so two at once each
    keep the other's value. The lock is the kernel's (flock), taken on the config file
    itself: every `set` can open it, nothing else locks it, and it leaves no file behind."""
    fd = os.open(config_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_saved(config_path: str | os.PathLike[str]) -> Saved:
    """The remembered variables (empty when there is no overlay); ConfigError if it is bad."""
    file = overlay_path(config_path)
    try:
        text = bounded_read.read_text(file, MAX_BYTES)
    except FileNotFoundError:
        return Saved()
    except bounded_read.FileTooLarge as e:
        size = f"is {e.size} bytes" if e.size is not None else f"is larger than {MAX_BYTES} bytes"
        raise ConfigError(file, f"{size}; an overrides file is at most {MAX_BYTES}: "
                                f"clear some with `eagle3 set {config_path} --clear VAR`") from None
    except bounded_read.RefusedFile as e:
        raise ConfigError(file, f"{e.why}; remove it, then save overrides with `eagle3 set`") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(file, f"cannot read the saved overrides: {e}") from None
    return parse(file, text)


def parse(file: Path, text: str) -> Saved:
    loader, root = compose(file, text)
    loader.dispose()
    if root is None:
        return Saved()

    def line(node: yaml.Node) -> int:
        return node.start_mark.line + 1

    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(file, "expected a mapping with `vars:`", line=line(root))
    out = Saved()
    for kn, vn in root.value:
        key = restore(kn.value) if isinstance(kn, yaml.ScalarNode) else "?"
        if key != "vars":
            raise ConfigError(file, "unknown key; an overrides file holds only `vars:`", line=line(kn), key=key)
        if isinstance(vn, yaml.ScalarNode) and vn.value in ("", "~", "null"):
            continue
        if not isinstance(vn, yaml.MappingNode):
            raise ConfigError(file, "expected a mapping of VAR: VALUE", line=line(vn), key="vars")
        if len(vn.value) > MAX_NAMES:
            raise ConfigError(file, f"{len(vn.value)} variables; at most {MAX_NAMES}", line=line(vn), key="vars")
        for n, v in vn.value:
            name = restore(n.value) if isinstance(n, yaml.ScalarNode) else ""
            where = f"vars.{name}" if name else "vars"
            if not VAR_NAME.match(name):
                raise ConfigError(file, "variable names use letters, digits, _ . - and start with a letter",
                                  line=line(n), key=where)
            if name in out:
                raise ConfigError(file, "duplicate key", line=line(n), key=where)
            if not isinstance(v, yaml.ScalarNode):
                raise ConfigError(file, "expected a text value", line=line(v), key=where)
            value = restore(v.value)
            if "\x00" in value:
                raise ConfigError(file, "the value holds a NUL character, which no command argument, path or "
                                        "environment variable can carry", line=line(v), key=where)
            if len(value) > MAX_VALUE:
                raise ConfigError(file, f"the value is {len(value)} characters; at most {MAX_VALUE}",
                                  line=line(v), key=where)
            out[name] = value
            out.lines[name] = line(n)
    return out


def render(config_path: str | os.PathLike[str], values: dict[str, str]) -> str:
    body = yaml.safe_dump({"vars": dict(sorted(values.items()))}, default_style='"', allow_unicode=True,
                          sort_keys=False, width=10_000) if values else "vars: {}\n"
    return HEADER.format(config=Path(config_path).name) + body


def write_saved(config_path: str | os.PathLike[str], values: dict[str, str]) -> Path:
    """Replace the overlay atomically (temp, fsync, rename, fsync the folder); remove it when
    nothing is left. Validated before it is written, so it always reads back. A new overlay is
    owner-only, as values may be private; an existing one keeps its mode, and a symlink stays a
    link (the file it names is replaced); a read-only overlay or a dangling link is refused."""
    file = overlay_path(config_path)
    target, mode = _destination(file)
    if not values and target == file:
        try:
            file.unlink()
            fsync_dir(file.parent)
        except FileNotFoundError:
            pass
        return file
    text = render(config_path, values)
    if len(text.encode()) > MAX_BYTES or len(values) > MAX_NAMES:
        raise ConfigError(file, f"would exceed {MAX_BYTES} bytes or {MAX_NAMES} variables")
    if parse(file, text) != values:
        raise ConfigError(file, "a value does not survive a round trip through YAML")
    try:
        write_bytes_atomic(target, text.encode(), tag=f".{os.getpid()}.{secrets.token_hex(3)}", mode=mode)
        if stat.S_IMODE(os.stat(target).st_mode) != mode:
            os.chmod(target, mode)  # the umask narrowed it at creation
    except OSError as e:
        raise ConfigError(file, f"cannot write the saved overrides: {e.strerror or e}"
                                + (f" (to {target}, the file the link names)" if target != file else "")) from None
    return file


def _destination(file: Path) -> tuple[Path, int]:
    """(the file to replace, the mode to give it): the overlay itself, or the file its symlink
    names so the link survives, with the mode it has (0600 when new). A read-only overlay, a
    dangling link or a link to something not a file is refused: replacing it would undo a choice
    someone made on purpose, or write where no overlay was."""
    try:
        st = os.lstat(file)
    except FileNotFoundError:
        return file, 0o600
    target = file
    if stat.S_ISLNK(st.st_mode):
        target = Path(os.path.realpath(file))
        try:
            st = os.stat(target)
        except FileNotFoundError:
            raise ConfigError(file, f"is a symbolic link to {target}, which does not exist; create that file "
                                    "or remove the link, then save again") from None
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(file, f"is a symbolic link to {target}, which is not a regular file; "
                                    "point it at a file or remove it") from None
    mode = stat.S_IMODE(st.st_mode)
    if not mode & stat.S_IWUSR or not os.access(target, os.W_OK):
        raise ConfigError(file, f"{'the file it links to, ' + str(target) + ', ' if target != file else ''}is "
                                f"read-only (mode {mode:04o}); it is left as it is: make it writable "
                                f"(chmod u+w {target}) to save overrides, or pass --set on each command")
    return target, mode
