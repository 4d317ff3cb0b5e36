"""A stage that starts torch runs its CPU work on the cores it may use, not torch's default of
every core the kernel reports: a container's quota caps it, torchrun's ranks on one host share
it, other work's busy cores are left to it, and `--threads` or OMP_NUM_THREADS still decide."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import cpu_threads


def cgroup_v2(tmp_path: Path, cpu_max: str | None) -> tuple[Path, Path]:
    root = tmp_path / "cg"
    (root / "job").mkdir(parents=True)
    if cpu_max is not None:
        (root / "job" / "cpu.max").write_text(cpu_max + "\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/job\n")
    return root, proc


def test_the_cgroup_quota_is_read_in_cores(tmp_path) -> None:
    assert cpu_threads.quota_cores(*cgroup_v2(tmp_path / "a", "150000 100000")) == 1.5
    assert cpu_threads.quota_cores(*cgroup_v2(tmp_path / "b", "max 100000")) is None
    assert cpu_threads.quota_cores(*cgroup_v2(tmp_path / "c", None)) is None
    assert cpu_threads.quota_cores(*cgroup_v2(tmp_path / "d", "garbage")) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-v1"
    proc.write_text("4:memory:/x\n3:cpu,cpuacct:/\n")
    assert cpu_threads.quota_cores(v1, proc) == 2.0
    (v1 / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_threads.quota_cores(v1, proc) is None
    assert cpu_threads.quota_cores(v1, tmp_path / "no-such-file") is None


@pytest.fixture
def box(monkeypatch):
    """A box of 8 cores on which the test says what the quota and the other work are."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))

    def shape(quota: float | None = None, busy: float = 0.0) -> None:
        monkeypatch.setattr(cpu_threads, "quota_cores", lambda: quota)
        monkeypatch.setattr(cpu_threads, "others_busy", lambda cpus: busy)
    return shape


def test_the_threads_fit_the_quota_the_ranks_and_the_other_work(box) -> None:
    box()
    assert cpu_threads.choose(None, {})[0] == 8
    box(quota=2.5)  # a container given 2.5 CPUs on an 8-core host: torch would start 8
    assert cpu_threads.choose(None, {})[0] == 2
    box(quota=0.5)
    assert cpu_threads.choose(None, {})[0] == 1
    box()
    assert cpu_threads.choose(None, {"LOCAL_WORLD_SIZE": "4"})[0] == 2  # torchrun's 4 ranks share the host
    box(busy=6.6)  # a shared box: other work keeps 6.6 cores busy
    threads, why = cpu_threads.choose(None, {})
    assert threads == 1 and "6.6" in why
    box(busy=7.9)
    assert cpu_threads.choose(None, {})[0] == 1  # never none
    assert cpu_threads.choose(None, {"OMP_NUM_THREADS": "3"}) == (3, "")  # the config's env decides
    assert cpu_threads.choose(5, {"OMP_NUM_THREADS": "3"}) == (5, "")  # --threads above all
    assert cpu_threads.choose(None, {"OMP_NUM_THREADS": "lots"})[0] == 1  # not a count: chosen as if unset


class Ticks:
    """/proc/stat as two reads apart see it."""

    def __init__(self, *texts: str) -> None:
        self.texts = iter(texts)

    def read_text(self, **_: str) -> str:
        return next(self.texts)


def test_others_busy_counts_the_cores_it_may_use() -> None:
    stat = Ticks("cpu  0 0 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\ncpu2 0 0 0 0 0 0 0 0\n",
                 "cpu  0 0 0 0 0 0 0 0\ncpu0 200 0 0 100 0 0 0 0\ncpu1 100 0 0 200 0 0 0 0\ncpu2 900 0 0 0 0 0 0 0\n")
    # cpu0 busy throughout, cpu1 idle; cpu2, busy too, is not one of ours
    assert cpu_threads.others_busy({0, 1}, stat, sample_s=0.01) == pytest.approx(1.0, abs=0.05)  # type: ignore[arg-type]


def test_a_stage_sets_torch_s_threads_and_says_why(box, monkeypatch, capsys) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    box(quota=3.0, busy=0.0)
    try:
        assert cpu_threads.fit("evaluate", None) == 3
        assert torch.get_num_threads() == 3
        said = capsys.readouterr()
        assert "evaluate: torch on 3 CPU threads (3 cores" in said.out and said.err == ""
        assert cpu_threads.fit("evaluate", 2) == 2 and torch.get_num_threads() == 2
        assert capsys.readouterr().out == ""  # the operator chose: nothing to explain
    finally:
        torch.set_num_threads(before)


def test_before_torch_loads_the_choice_is_what_torch_starts_with(tmp_path) -> None:
    pytest.importorskip("torch")
    code = ("import os, sys; from pipeline import cpu_threads; cpu_threads.fit('train', 1); "
            "assert 'torch' not in sys.modules; import torch; print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.stdout.split() == ["1", "1"], done.stderr


STAGES = {
    "evaluate": ("pipeline.evaluate.__main__", []),
    "extract": ("pipeline.extract.__main__", []),
    "train": ("pipeline.train.__main__", []),
    "export": ("pipeline.export.__main__", []),
    "regenerate": ("pipeline.regenerate.__main__", ["chats.jsonl", "--out", "o.jsonl", "--backend", "hf"]),
    "synthesis": ("pipeline.regenerate.__main__", ["--synthesize", "4", "--out", "o.jsonl", "--model", "m"]),
    "prepare target": ("pipeline.prepare.__main__", ["target", "--from", "m", "--out", "o"]),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_torch_stage_takes_threads_and_bounds_them(stage, capsys) -> None:
    module, argv = STAGES[stage]
    with pytest.raises(SystemExit) as ended:
        importlib.import_module(module).main([*argv, "--threads", "0"])
    assert ended.value.code == 2
    assert "--threads takes 1 to 1024, got '0'" in capsys.readouterr().err
