"""A run that meets a non-finite loss (or weights) stops (exit 3) before the optimiser takes the step
(or before a checkpoint holds them), and the checkpoints it wrote before stay finite, `latest` naming
the last good one."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import torch
from safetensors.torch import load_file
from stage_call import StageResult, call_stage

# --log-every 3 and --save-every 2: the poisoned step 5 is neither logged nor saved, so its refusal (taken on the
# device) is read on the host when step 6 comes to its optimiser step, and must still name step 5 and keep step 4
OPTS = ["--batch-tokens", "256", "--max-len", "256", "--lr", "3e-3", "--log-every", "3", "--workers", "0",
        "--ttt-length", "3", "--device", "cpu", "--save-every", "2", "--keep-last", "5"]
HUGE = 3e38  # finite in bf16 and fp32; the drafter's first layer overflows on it


def train(store: Path, target: Path, out: Path, env: dict, *more: str) -> StageResult:
    return call_stage("train", ["--store", store, "--target", target, "--out", out, *OPTS, *more], env=env)


def poison_aux_states(store: Path) -> int:
    """Overwrite every sample's aux_hidden_state with HUGE in place: same file size, same header,
    only the tensor's bytes change (the manifest's checksums no longer match: train with
    --checksums none). Returns the number of files changed."""
    files = sorted(store.glob("rows_*/*.safetensors"))
    for path in files:
        with open(path, "r+b") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            entry = json.loads(f.read(n))["aux_hidden_state"]
            begin, end = entry["data_offsets"]
            dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[entry["dtype"]]
            value = torch.finfo(dtype).max if dtype == torch.float16 else HUGE
            count = (end - begin) // (torch.finfo(dtype).bits // 8)
            f.seek(8 + n + begin)
            f.write(torch.full((count,), value, dtype=dtype).view(torch.uint8).numpy().tobytes())
            assert f.tell() == 8 + n + end
    return len(files)


def finite_weights(ckpt: Path) -> bool:
    weights = load_file(ckpt / "model.safetensors")
    return bool(weights) and all(bool(torch.isfinite(t.float()).all()) for t in weights.values())


def test_a_non_finite_loss_stops_the_run_naming_the_step_and_keeps_the_finite_checkpoints(
        reference_store, tiny_target, tmp_path, xt):
    env = xt.cli_env()
    store, out = tmp_path / "store", tmp_path / "run"
    shutil.copytree(reference_store, store)
    clean = train(store, tiny_target, out, env, "--steps", "4")
    assert clean.returncode == 0, clean.stderr
    ckpts = out / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_00000004"

    sizes = {p: p.stat().st_size for p in store.glob("rows_*/*.safetensors")}
    assert poison_aux_states(store) == len(sizes) > 0
    assert {p: p.stat().st_size for p in sizes} == sizes
    events = tmp_path / "events.jsonl"
    bad = train(store, tiny_target, out, {**env, "EAGLE3_EVENTS": str(events)}, "--steps", "8", "--resume",
                "--checksums", "none")

    assert bad.returncode == 3, (bad.returncode, bad.stderr[-3000:])
    assert "Traceback" not in bad.stderr
    assert "step 5/8" in bad.stderr and "not finite" in bad.stderr, bad.stderr[-3000:]
    assert "step_00000004" in bad.stderr  # it names the checkpoint to resume from
    errors = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(e["kind"] == "message" and e.get("level") == "error" and "step 5/8" in e["text"] for e in errors)
    # nothing after step 4 was kept, and what was kept is finite
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_00000002", "step_00000004"]
    assert (ckpts / "latest").read_text().strip() == "step_00000004"
    for name in ("step_00000002", "step_00000004"):
        assert finite_weights(ckpts / name), name


def test_weights_that_turn_non_finite_stop_the_run_with_exit_3_as_docs_say(reference_store, tiny_target, tmp_path, xt):
    """A resumed optimiser state holding a NaN moment: the step's loss and gradient are finite,
    and the update makes the weights NaN. With --save-every 1 the checkpoint's finiteness check
    meets them first: it exited 1 ("a bug") where docs/train.md says a non-finite run stops
    with 3, naming the step and the last good checkpoint to resume from."""
    env = xt.cli_env()
    out = tmp_path / "run"
    clean = train(reference_store, tiny_target, out, env, "--steps", "2", "--save-every", "1")
    assert clean.returncode == 0, clean.stderr
    ckpts = out / "checkpoints"
    state_file = ckpts / "step_00000002" / "train_state.pt"
    state = torch.load(state_file, weights_only=True)
    moments = next(iter(state["optimizer"]["state"].values()))
    moments["exp_avg"].fill_(float("nan"))
    torch.save(state, state_file)
    events = tmp_path / "events.jsonl"
    bad = train(reference_store, tiny_target, out, {**env, "EAGLE3_EVENTS": str(events)}, "--steps", "4",
                "--save-every", "1", "--resume")

    assert bad.returncode == 3, (bad.returncode, bad.stderr[-3000:])
    assert "Traceback" not in bad.stderr
    assert "step 3/4" in bad.stderr and "weights are not finite" in bad.stderr, bad.stderr[-3000:]
    assert "step_00000002" in bad.stderr  # the checkpoint to resume from
    errors = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(e["kind"] == "message" and e.get("level") == "error" and "step 3/4" in e["text"] for e in errors)
    assert (ckpts / "latest").read_text().strip() == "step_00000002"
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_00000001", "step_00000002"]


def test_a_refused_step_leaves_weights_and_moments_untouched_and_is_named_when_the_next_step_comes(tmp_path):
    """The device refuses the step (the fused AdamW's found_inf); the host reads the refusal one
    step later, before that step's optimiser moves anything."""
    from types import SimpleNamespace

    import pytest

    from pipeline.train import step as steps
    from pipeline.train.dist import Dist
    from pipeline.train.finite import FiniteGuard, NotFinite

    cpu = torch.device("cpu")
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([w], lr=0.1, fused=True)
    run = SimpleNamespace(opts=SimpleNamespace(max_grad_norm=0.5), params=[w], dist=Dist(0, 1, 0, cpu), opt=opt,
                          sched=torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0), guard=FiniteGuard(cpu),
                          out=tmp_path, total=9)
    w.grad = torch.ones(3)
    steps.apply(run, 0, torch.tensor(1.0), {})
    kept = w.detach().clone(), {k: v.clone() for k, v in opt.state[w].items()}
    assert not torch.equal(kept[0], torch.ones(3))  # the good step moved the weights
    w.grad = torch.full((3,), float("nan"))
    steps.apply(run, 1, torch.tensor(float("nan")), {})  # nothing raised yet: the host did not wait
    w.grad = torch.ones(3)
    with pytest.raises(NotFinite, match=r"step 2/9: the loss \(nan\)"):
        steps.apply(run, 2, torch.tensor(1.0), {})
    assert torch.equal(w.detach(), kept[0])  # neither the refused step 2 nor step 3 moved anything
    assert all(torch.equal(opt.state[w][k], v) for k, v in kept[1].items())
