"""Disk, shm, host sources and the deterministic fakes the UI tests draw."""

from __future__ import annotations

import os

from console.core.telemetry.disk import DiskSource
from console.core.telemetry.fake import FakeDiskSource, FakeGpuSource, FakeHostSource, FakeShmSource
from console.core.telemetry.host import HostSource
from console.core.telemetry.shm import ShmSource


def test_disk_measures_a_not_yet_created_volume_on_its_parent(tmp_path):
    future = tmp_path / "workdir" / "data"
    r = DiskSource([tmp_path, future], clock=lambda: 5.0).read()
    assert r.t == 5.0
    here, later = r.volumes
    assert later.path == str(future) and later.measured_path == str(tmp_path)
    assert here.measured_path is None and here.error is None
    st = os.statvfs(tmp_path)
    assert later.total == here.total == st.f_blocks * st.f_frsize
    assert 0 < later.free <= later.total and 0 <= later.used <= later.total


def test_disk_unreadable_volume_is_an_error_line_not_an_exception(tmp_path):
    bad = tmp_path / ("x" * 300) / "data"  # a name the kernel refuses (ENAMETOOLONG), even for root
    ok, vol = DiskSource([tmp_path, bad]).read().volumes
    assert ok.error is None
    assert vol.total is None and vol.free is None
    assert vol.error.startswith(str(bad)) and "cannot read" in vol.error


def test_shm_counts_the_dump_folder_recursively(tmp_path):
    dump = tmp_path / "dump"
    (dump / "rows_0").mkdir(parents=True)
    for i in range(3):
        (dump / "rows_0" / f"{i}.safetensors").write_bytes(b"x" * 100)
    (dump / "manifest.jsonl").write_bytes(b"y" * 10)
    r = ShmSource(path=tmp_path, dump=dump).read()
    assert r.error is None and r.total > 0 and r.free > 0
    assert (r.dump_path, r.dump_files, r.dump_bytes, r.dump_truncated) == (str(dump), 4, 310, False)


def test_shm_scan_stops_at_its_budget_and_says_so(tmp_path):
    for i in range(50):
        (tmp_path / f"{i}.bin").write_bytes(b"z")
    r = ShmSource(path=tmp_path, dump=tmp_path, max_entries=20).read()
    assert r.dump_truncated is True and r.dump_files == 20 and r.dump_bytes == 20


def test_shm_missing_dump_folder(tmp_path):
    r = ShmSource(path=tmp_path, dump=tmp_path / "nope").read()
    assert r.dump_files is None and "no such folder" in r.dump_error and r.error is None


def test_shm_missing_filesystem_is_an_error(tmp_path):
    r = ShmSource(path=tmp_path / "no-shm").read()
    assert r.total is None and str(tmp_path / "no-shm") in r.error


def test_host_reads_cpu_memory_load():
    src = HostSource(clock=lambda: 1.0)
    sum(i * i for i in range(200_000))  # some CPU time between reads
    r = src.read()
    assert r.t == 1.0
    assert r.cpu_percent is not None and 0.0 <= r.cpu_percent <= 100.0
    assert 0 < r.mem_used <= r.mem_total
    assert r.load is not None and len(r.load) == 3
    assert r.cpu_count == os.cpu_count()


def test_fake_gpus_are_deterministic_vary_over_time_and_one_fails():
    a, b = FakeGpuSource(seed=0), FakeGpuSource(seed=0)
    assert a.read(t=100.0) == b.read(t=100.0)
    r1, r2 = a.read(t=100.0), a.read(t=110.0)
    assert len(r1.gpus) == 8
    assert [g.utilization for g in r1.gpus] != [g.utilization for g in r2.gpus]
    bad = r1.gpus[3]
    assert bad.utilization is None and bad.memory_used is None and bad.processes_unknown
    for g in r1.gpus:
        if g.index != 3:
            assert 0 <= g.utilization <= 100 and 0 < g.memory_used < g.memory_total
            assert g.power <= g.power_limit
    assert FakeGpuSource(error="NVIDIA driver not found (libnvidia-ml.so.1): x").read(t=1.0).gpus == ()


def test_fake_gpu_processes_are_the_ones_asked_for():
    r = FakeGpuSource(n=2, failing=(), processes={1: [4242]}).read(t=0.0)
    assert r.gpus[0].processes == () and [p.pid for p in r.gpus[1].processes] == [4242]


def test_fake_disk_shm_host_move_predictably():
    disk = FakeDiskSource(volumes=["/data"], total=1000, used=100, rate=10.0)
    assert disk.read(t=50.0).volumes[0].used == 100
    v = disk.read(t=60.0).volumes[0]
    assert (v.used, v.free) == (200, 800)
    shm = FakeShmSource(files_per_s=2, file_bytes=5, used=0)
    shm.read(t=0.0)
    s = shm.read(t=10.0)
    assert (s.dump_files, s.dump_bytes, s.used) == (20, 100, 100)
    assert FakeHostSource().read(t=3.0) == FakeHostSource().read(t=3.0)
