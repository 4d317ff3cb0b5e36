"""Ring buffers, GPU sparkline history and the disk-full forecast."""

from __future__ import annotations

import pytest

from console.core.telemetry.fake import FakeGpuSource
from console.core.telemetry.history import DiskForecast, GpuHistory, Series
from console.core.telemetry.samples import DiskReading, VolumeSample

GB = 10**9


def disk(t: float, used: int, total: int = 100 * GB, path: str = "/data") -> DiskReading:
    return DiskReading(t=t, volumes=(VolumeSample(path, total, used, total - used),))


def test_series_is_bounded_and_rates_per_second():
    s = Series(maxlen=5)
    for i in range(10):
        s.append(float(i), 100.0 * i)
    assert len(s) == 5 and s.values() == [500.0, 600.0, 700.0, 800.0, 900.0]
    assert s.rate() == pytest.approx(100.0)
    assert s.rate(window=2) == pytest.approx(100.0)


def test_series_drops_points_older_than_max_age_and_late_points():
    s = Series(maxlen=100, max_age=10)
    for t in range(0, 30, 2):
        s.append(t, t)
    assert s.points()[0][0] == 18 and s.last == (28.0, 28.0)
    s.append(5, 999)  # arrived late: ignored
    assert s.last == (28.0, 28.0)
    assert Series().rate() is None


def test_gpu_history_keeps_60_seconds_per_gpu_and_skips_na():
    h = GpuHistory(seconds=60)
    src = FakeGpuSource(n=4, failing=(3,))
    for t in range(0, 120):
        h.add(src.read(t=float(t)))
    util0 = h.utilization(0)
    assert len(util0) == 61  # t = 59..119
    assert util0[-1] == src.read(t=119.0).gpus[0].utilization
    assert h.utilization(3) == [] and h.utilization(42) == []


def test_disk_forecast_time_to_full_from_two_readings():
    f = DiskForecast()
    f.update(disk(0.0, 40 * GB))
    assert f.rate("/data") is None and f.time_to_full("/data") is None
    f.update(disk(10.0, 50 * GB))  # 1 GB/s, 50 GB free
    v = f.volume("/data")
    assert v.rate == pytest.approx(GB)
    assert v.time_to_full == pytest.approx(50.0)
    assert f.time_to_full("/data") == pytest.approx(50.0)


def test_disk_forecast_no_time_to_full_while_space_is_freed():
    f = DiskForecast()
    f.feed([disk(0.0, 50 * GB), disk(10.0, 40 * GB)])
    assert f.rate("/data") < 0 and f.time_to_full("/data") is None


def test_disk_forecast_will_fit_warns_when_remaining_exceeds_free():
    f = DiskForecast()
    f.feed([disk(0.0, 90 * GB), disk(5.0, 95 * GB)])  # 5 GB free
    assert f.will_fit("/data", 4 * GB) is True
    assert f.will_fit("/data", 6 * GB) is False
    assert f.will_fit("/data", 4 * GB, reserve_bytes=2 * GB) is False
    assert f.will_fit("/elsewhere", 1) is None


def test_disk_forecast_smooths_over_its_window():
    f = DiskForecast(window_s=20)
    f.update(disk(0.0, 0))
    f.update(disk(1.0, 50 * GB))  # an old burst
    for t in range(2, 60, 2):
        f.update(disk(float(t), 50 * GB + (t - 1) * GB // 10))  # then 0.1 GB/s
    assert f.rate("/data") == pytest.approx(0.1 * GB, rel=1e-6)


def test_disk_forecast_names_the_volume_holding_a_path():
    f = DiskForecast()
    f.update(DiskReading(t=0, volumes=(VolumeSample("/data", 1, 0, 1), VolumeSample("/data/shm", 1, 0, 1))))
    assert f.volume_for("/data/shm/x/y.bin") == "/data/shm"
    assert f.volume_for("/data/out") == "/data"
    assert f.volume_for("/database") is None


def test_disk_forecast_keeps_an_unreadable_volume_visible():
    f = DiskForecast()
    f.update(DiskReading(t=0, volumes=(VolumeSample("/mnt/nfs", None, None, None, error="/mnt/nfs: cannot read"),)))
    v = f.volume("/mnt/nfs")
    assert v.error == "/mnt/nfs: cannot read" and v.rate is None and v.will_fit(1) is None


def test_disk_write_rate_survives_a_clean_that_frees_space_meanwhile():
    """Extraction writes 20 MB/s; a `clean` frees 222 MB in one interval. The figure stays
    a write rate (about +20 MB/s), not the -11.6 MB/s a two-point difference showed."""
    f = DiskForecast()
    used = 100 * GB
    for t in range(0, 40, 2):
        used += 40 * 10**6
        if t == 20:
            used -= 222 * 10**6
        f.update(disk(float(t), used))
    assert f.rate("/data") == pytest.approx(20 * 10**6, rel=1e-6)
