"""What a check may look at besides its argument: the config (to resolve relative
paths against its folder and find the phase that produces a file), one GPU reading
shared by every GPU check of a run, and what phases starting beside this one (or running)
will take of the disks and GPUs (`sharing`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from console.core.checks import hints
from console.core.checks.sharing import Sharing
from console.core.files.interpreter import path_with_interpreter, python_argv
from console.core.model.config import Config, Phase
from console.core.telemetry.nvml import NvmlGpuSource
from console.core.telemetry.samples import GpuReading


def _nvml_reading() -> GpuReading:
    """One NVML poll through the telemetry source (which loads NVML itself, on first use)."""
    source = None
    try:
        source = NvmlGpuSource()
        return source.read()
    except Exception as e:  # the source should never raise; a check must not crash on it
        return GpuReading(t=time.time(), error=f"no GPU reading available: {type(e).__name__}: {e}")
    finally:
        if source is not None:
            try:
                source.close()
            except Exception:
                pass


class CheckContext:
    def __init__(self, config: Config, phase: Phase | None = None,
                 gpu_reader: Callable[[], GpuReading] | None = None, sharing: Sharing | None = None) -> None:
        self.config = config
        self.phase = phase
        self.sharing = sharing or Sharing()
        self._gpu_reader = gpu_reader or _nvml_reading
        self._gpu_lock = threading.Lock()
        self._gpus: GpuReading | None = None

    @property
    def root(self) -> Path:
        return self.config.root

    def resolve(self, p: str | os.PathLike[str]) -> Path:
        return self.config.resolve(p)

    @property
    def python(self) -> str | None:
        """The phase's (or config's) `python:` setting; None means the console's own."""
        return self.config.python_for(self.phase)

    def env(self) -> dict[str, str]:
        """The environment a check's subprocess gets: the console's, the interpreter's bin
        folder first on PATH, plus the phase's additions."""
        env = dict(os.environ)
        env.update(path_with_interpreter(env, self.python))
        if self.phase is not None:
            env.update(self.phase.env)
        return env

    def argv(self, argv: list[str]) -> list[str]:
        """A check command's argv with a leading `python` meaning the phase's interpreter."""
        return python_argv(argv, self.python)

    def read_gpus(self) -> GpuReading:
        """One reading per context, so gpu_free_memory and gpus_idle see the same moment."""
        with self._gpu_lock:
            if self._gpus is None:
                try:
                    self._gpus = self._gpu_reader()
                except Exception as e:
                    self._gpus = GpuReading(t=time.time(), error=f"GPU reading failed: {type(e).__name__}: {e}")
            return self._gpus

    def producer_of(self, path: Path) -> Phase | None:
        """The phase that declares `path` (or a folder holding it) among its outputs."""
        return hints.producer_of(self.config, path)
