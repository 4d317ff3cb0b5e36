"""The space and GPU checks of a phase starting beside others judge the sum: what the phases
starting with it and those running will take of the same filesystem or GPU."""

from __future__ import annotations

import os

from core_harness import config_for

from console.core.checks import disk
from console.core.checks.context import CheckContext
from console.core.checks.registry import default_name, run_checks
from console.core.checks.sharing import GpuClaim, Sharing, SpaceClaim, share_of, visible_gpus
from console.core.lifecycle.project import SHARES_CHECK, Project
from console.core.model.config import CheckSpec, Phase
from console.core.telemetry.samples import GpuReading, GpuSample

GB = 10**9


def one(kind, arg, ctx):
    return run_checks([CheckSpec(kind=kind, arg=arg, name=default_name(kind, arg))], ctx)[0]


def gpus(*used_gb: float) -> GpuReading:
    return GpuReading(t=0.0, gpus=tuple(
        GpuSample(index=i, name="H100", uuid=f"GPU-{i}", utilization=0.0, memory_used=int(u * GB),
                  memory_total=80 * GB, temperature=40.0, power=100.0, power_limit=700.0)
        for i, u in enumerate(used_gb)), driver="550")


def test_free_space_counts_what_phases_beside_it_and_running_will_write_on_that_filesystem(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda path: (10 * GB, 40 * GB))
    here = os.stat(tmp_path).st_dev
    sharing = Sharing(space=(SpaceClaim("extract", here, 4 * GB, False), SpaceClaim("regen", here, 3 * GB, True),
                             SpaceClaim("elsewhere", here + 1, 100 * GB, True)))
    ctx = CheckContext(config_for(tmp_path), sharing=sharing)
    r = one("free_space", {"path": ".", "need": "4GB"}, ctx)
    assert r.status == "fail"
    assert r.message.endswith("plus 7.0 GB for extract (starting beside it), regen (running): 11.0 GB in all, "
                              "only 10.0 GB free (short by 1.0 GB)")
    assert [c["phase"] for c in r.evidence["shared"]] == ["extract", "regen"]  # not the other filesystem's
    assert one("free_space", {"path": ".", "need": "3GB"}, ctx).status == "pass"
    assert one("free_space", {"path": ".", "need": "4GB"}, CheckContext(config_for(tmp_path))).status == "pass"


def test_gpu_free_memory_counts_needs_and_shares_of_phases_starting_beside_it(tmp_path):
    def ctx(*claims: GpuClaim) -> CheckContext:
        return CheckContext(config_for(tmp_path), gpu_reader=lambda: gpus(10, 10), sharing=Sharing(gpu=claims))

    need = {"need": "30GB"}
    assert one("gpu_free_memory", need, ctx()).status == "pass"
    r = one("gpu_free_memory", need, ctx(GpuClaim("train-a", (0,), bytes=45 * GB)))
    assert r.status == "fail" and r.message == ("need 30.0 GB per GPU: GPU 0 has 25.0 GB free once 45.0 GB "
                                                "goes to train-a (starting beside it)")
    r = one("gpu_free_memory", {"need": "35GB"}, ctx(GpuClaim("train-b", None, share=0.5)))
    assert r.status == "fail" and "GPU 1 has 30.0 GB free once 40.0 GB goes to train-b" in r.message
    assert r.evidence["shared"]["1"] == [{"phase": "train-b", "bytes": 40 * GB, "running": False}]
    # a running phase's memory is in the driver's reading already: not counted twice
    assert one("gpu_free_memory", {"need": "35GB"}, ctx(GpuClaim("train-c", None, share=0.5, running=True))).status == "pass"


def test_gpu_memory_shares_of_phases_beside_each_other_add_up_to_one_gpu_at_most(tmp_path):
    phase = Phase(id="train-b", title="b", argv=("python", "-m", "pipeline.train", "--gpu-memory-share", "0.5"))
    project = Project(config_for(tmp_path, phase))
    beside = Sharing(gpu=(GpuClaim("train-a", None, share=0.45, running=True),))
    assert [r.name for r in project.check("train-b", journal=False)] == ["needs-done"]  # alone: nothing to add
    ok = next(r for r in project.check("train-b", journal=False, sharing=beside) if r.name == SHARES_CHECK)
    assert ok.status == "pass" and "0.95 of a GPU" in ok.message
    crowded = Sharing(gpu=beside.gpu + (GpuClaim("train-c", (0, 1), share=0.3),))
    bad = next(r for r in project.check("train-b", journal=False, sharing=crowded) if r.name == SHARES_CHECK)
    assert bad.blocking and "1.25 of a GPU" in bad.message and "train-a (running), train-c (starting beside it)" in bad.message
    elsewhere = Sharing(gpu=(GpuClaim("train-d", (3,), share=0.9),))
    on_gpu_2 = Project(config_for(tmp_path, Phase(id="train-b", title="b", argv=phase.argv,
                                                  env={"CUDA_VISIBLE_DEVICES": "2"})))
    assert SHARES_CHECK not in [r.name for r in on_gpu_2.check("train-b", journal=False, sharing=elsewhere)]


def test_a_share_and_the_gpus_are_read_from_the_phase_as_its_program_would() -> None:
    assert share_of(["python", "-m", "pipeline.train", "--gpu-memory-share", "0.237"]) == 0.237
    assert share_of(["--gpu-memory-share=0.5"]) == 0.5 and share_of(["--steps", "3"]) is None
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,2"}) == (0, 2)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"}) is None and visible_gpus({}) is None


def test_a_running_phase_claims_what_it_still_has_to_write(tmp_path) -> None:
    from console.core.flow.linefeed import PrefixedLog
    from console.core.flow.runall import _Live
    from console.core.lifecycle.livestats import EventTail
    from console.core.runs.rundir import RunDir
    from pipeline.events import EventWriter

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    phase = Phase(id="extract", title="x", argv=("true",), outputs=(tmp_path / "store",))
    here = os.stat(tmp_path).st_dev
    live = _Live(phase, run, PrefixedLog(run.output_log, "extract"), EventTail(run.events_jsonl), [(here, 5 * GB)],
                 here)
    assert live.space_claims() == [SpaceClaim("extract", here, 5 * GB, True)]  # nothing written yet: its need
    writer = EventWriter(str(run.events_jsonl))
    writer.progress(0, 100, "samples", bytes_written=GB)
    assert live.space_claims() == [SpaceClaim("extract", here, 4 * GB, True)]  # its need less what it wrote
    writer.progress(10, 100, "samples", bytes_written=3 * GB)
    assert live.space_claims() == [SpaceClaim("extract", here, 18 * GB, True)]  # its events' own forecast
