"""Run a stage program's `main(argv)` inside the test process, as `python -m pipeline.<stage>`
would run it, for tests that check what a stage writes and says rather than how its process
behaves (signals, kills, `os._exit`, the interpreter's own exit): each start of a stage as a
program imports torch and most of transformers again, seconds of a core before any work, where
the test process has them loaded once.

What a stage may change in its process is put back when it returns: the environment, the
working directory, `sys.argv` and `sys.path`, signal handlers, torch's thread count, RNG
states, grad mode, deterministic algorithms and cuDNN SDPA choice, dynamo's recompile limits,
transformers' verbosity and progress bars, warnings filters and the root logger. Its output is
captured at the file descriptors, so what a C library or a forked child writes is caught too.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import random
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What a test's stage subprocess was given (tests/pipeline/conftest.py cli_env): no events file,
# no torchrun rank, one CPU thread.
DROPPED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
PINNED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
DYNAMO_LIMITS = ("recompile_limit", "cache_size_limit")


@dataclass(frozen=True)
class StageResult:
    """What subprocess.run(..., capture_output=True, text=True) returns, for the fields tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def call_stage(stage: str, argv: Sequence[object], env: Mapping[str, str] | None = None,
               cwd: Path | None = None) -> StageResult:
    """`python -m pipeline.<stage> ARGV` with `env` added to the test environment (EAGLE3_*
    and rank variables removed, one thread), run in this process from `cwd` (the checkout by
    default). A `SystemExit` (argparse's usage errors) gives its code, as the interpreter would."""
    module = importlib.import_module(f"pipeline.{stage}.__main__")
    args = [str(a) for a in argv]
    with _restored(), _captured() as (out, err):
        _enter(module.__file__ or stage, args, env, cwd or REPO)
        try:
            code = module.main(args)
        except SystemExit as e:
            code = _exit_code(e.code)
        sys.stdout.flush()
        sys.stderr.flush()
    return StageResult([sys.executable, "-m", f"pipeline.{stage}", *args], int(code or 0), out.text, err.text)


def group_gone(pgid: int, timeout: float = 60) -> None:
    """Wait until no process of a killed program's group is left: its loader workers, which
    hold its run folder's lock, exit after it, and a program started next spends seconds
    importing where a stage run in-process would find the lock still held."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"process group {pgid} still has processes {timeout} s after its kill"
        time.sleep(0.02)  # wait-ok: polling the group with a deadline


def _enter(main_file: str, args: list[str], env: Mapping[str, str] | None, cwd: Path) -> None:
    for key in [k for k in os.environ if k.startswith("EAGLE3_") or k in DROPPED]:
        del os.environ[key]
    os.environ.update(PINNED)
    os.environ.update(env or {})
    os.chdir(cwd)
    sys.argv = [main_file, *args]
    threads = os.environ["OMP_NUM_THREADS"]
    sys.modules["torch"].set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else 1)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _Captured:
    def __init__(self) -> None:
        self.text = ""


@contextlib.contextmanager
def _captured() -> Iterator[tuple[_Captured, _Captured]]:
    """Whatever reaches fds 1 and 2 (Python's streams write straight to them) while the
    block runs."""
    found = (_Captured(), _Captured())
    saved_streams = (sys.stdout, sys.stderr)
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(2)]
        for stream in saved_streams:
            stream.flush()
        saved_fds = [os.dup(fd) for fd in (1, 2)]
        try:
            for fd, f in zip((1, 2), files):
                os.dup2(f.fileno(), fd)
            sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                                                       errors="backslashreplace", write_through=True)
                                      for fd in (1, 2))
            yield found
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(ValueError, OSError):
                    stream.flush()
            sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
        for holder, f in zip(found, files):
            f.seek(0)
            holder.text = f.read().decode("utf-8", errors="replace")


@contextlib.contextmanager
def _restored() -> Iterator[None]:
    """Everything a stage may change in its process, as it was before."""
    environ, cwd, argv, path = dict(os.environ), os.getcwd(), sys.argv, list(sys.path)
    handlers = {s: signal.getsignal(s) for s in signal.valid_signals()
                if s not in (signal.SIGKILL, signal.SIGSTOP)}
    py_random = random.getstate()
    root = logging.getLogger()
    log_state = (root.level, list(root.handlers), logging.root.manager.disable)
    torch_state = _torch_state()
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.argv, sys.path[:] = argv, path
        for s, handler in handlers.items():
            if handler is not None and signal.getsignal(s) is not handler:
                signal.signal(s, handler)
        random.setstate(py_random)
        root.setLevel(log_state[0])
        root.handlers[:] = log_state[1]
        logging.disable(log_state[2])
        _restore_torch(torch_state)


def _torch_state() -> dict:
    """torch and transformers are loaded here if the stage has not been yet: a stage that
    loads them would otherwise leave its settings behind with nothing to put back."""
    import torch
    import transformers.utils.logging as hf

    return {"threads": torch.get_num_threads(), "rng": torch.get_rng_state(), "grad": torch.is_grad_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_sdp": torch.backends.cuda.cudnn_sdp_enabled(), "dynamo": _dynamo_limits(),
            "hf": (hf.get_verbosity(), hf.is_progress_bar_enabled())}


def _dynamo_limits() -> dict[str, object]:
    """dynamo's recompile limits (pipeline/capture.py raises them), where dynamo is loaded:
    loading it costs seconds, and one loaded by the stage starts from its defaults."""
    cfg = sys.modules.get("torch._dynamo.config")
    return {} if cfg is None else {k: getattr(cfg, k) for k in DYNAMO_LIMITS if hasattr(cfg, k)}


def _restore_torch(state: dict) -> None:
    import torch
    import transformers.utils.logging as hf

    torch.set_num_threads(state["threads"])
    torch.set_rng_state(state["rng"])
    torch.set_grad_enabled(state["grad"])
    torch.use_deterministic_algorithms(state["deterministic"], warn_only=state["deterministic_warn"])
    torch.backends.cuda.enable_cudnn_sdp(state["cudnn_sdp"])
    cfg = sys.modules.get("torch._dynamo.config")
    for key in DYNAMO_LIMITS if cfg is not None else ():
        if hasattr(cfg, key):
            setattr(cfg, key, state["dynamo"].get(key, cfg._config[key].default))
    hf.set_verbosity(state["hf"][0])
    (hf.enable_progress_bar if state["hf"][1] else hf.disable_progress_bar)()
