"""pipeline.patch.sglang_dump on CPU, with tensors shaped as SGLang 0.5.23 passes them to the patched
forward: one packed batch of several requests ([sum(extend_lens), H] rows), aux states as a
list of [N,H] tensors (llama.py) or one packed [N,3H] tensor (deepseek_v2.py)."""

from __future__ import annotations

import enum
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from pipeline.dump_protocol import ERROR_ROOM
from pipeline.patch.sglang_dump import (
    DumpConfig,
    DumpConfigError,
    DumpHook,
    attach,
    server_problems,
)
from pipeline.target.config import capture_layers

H = 8


class Mode(enum.Enum):
    """The ForwardMode methods the hook asks (sglang's enum, duck-typed)."""

    EXTEND = 1
    DECODE = 2
    IDLE = 3
    TARGET_VERIFY = 4

    def is_extend(self):
        return self in (Mode.EXTEND, Mode.TARGET_VERIFY)

    def is_target_verify(self):
        return self is Mode.TARGET_VERIFY

    def is_idle(self):
        return self is Mode.IDLE


@dataclass
class Batch:
    """The ForwardBatch fields the hook reads."""

    rids: list
    extend_seq_lens_cpu: list
    extend_prefix_lens_cpu: list
    input_ids: torch.Tensor
    forward_mode: Mode = Mode.EXTEND
    extend_seq_lens: torch.Tensor | None = None
    extend_prefix_lens: torch.Tensor | None = None


@dataclass
class Packed:
    batch: Batch
    hidden: torch.Tensor  # [N,H] final, post-norm
    layers: list = field(default_factory=list)  # 3 x [N,H] capture-layer inputs


def packed_batch(requests: list[tuple[str, int, int]], dtype=torch.bfloat16, seed=0) -> Packed:
    """(rid, extend_len, prefix_len) per request, packed the way SGLang packs an extend batch."""
    g = torch.Generator().manual_seed(seed)
    n = sum(e for _, e, _ in requests)
    ids = torch.randint(0, 1000, (n,), generator=g)
    hidden = torch.randn(n, H, generator=g).to(dtype)
    layers = [torch.randn(n, H, generator=g).to(dtype) for _ in range(3)]
    batch = Batch([r for r, _, _ in requests], [e for _, e, _ in requests], [p for _, _, p in requests], ids)
    return Packed(batch, hidden, layers)


def hook_for(folder: Path, budget: int = 10**9, wait: float = 5.0, **kw) -> DumpHook:
    folder.mkdir(parents=True, exist_ok=True)
    return DumpHook(DumpConfig(folder, budget, wait), **kw)


def rows(packed: Packed, i: int) -> slice:
    lens = packed.batch.extend_seq_lens_cpu
    start = sum(lens[:i])
    return slice(start, start + lens[i])


REQUESTS = [("e3-0-aaaaaaaaaaaaaaaa", 5, 0), ("e3-1-bbbbbbbbbbbbbbbb", 3, 0), ("e3-2-cccccccccccccccc", 4, 128),
            ("warmup-xyz", 2, 0), ("e3-3-dddddddddddddddd", 7, 0)]


@pytest.mark.parametrize("aux_form", ["list", "packed"])
def test_a_packed_batch_writes_exactly_each_requests_slices(tmp_path, aux_form):
    p = packed_batch(REQUESTS)
    aux = p.layers if aux_form == "list" else torch.cat(p.layers, dim=-1)
    hook = hook_for(tmp_path / "dump")
    hook(p.batch, p.hidden, aux)

    names = sorted(os.listdir(tmp_path / "dump"))
    assert names == [".eagle3-dump.lock", "e3-0-aaaaaaaaaaaaaaaa.safetensors", "e3-1-bbbbbbbbbbbbbbbb.safetensors",
                     "e3-2-cccccccccccccccc.error", "e3-3-dddddddddddddddd.safetensors"]
    for i, (rid, n, _) in enumerate(REQUESTS):
        if rid.startswith("e3-") and REQUESTS[i][2] == 0:
            path = tmp_path / "dump" / f"{rid}.safetensors"
            got = load_file(path)
            r = rows(p, i)
            assert set(got) == {"input_ids", "hidden_state", "aux_hidden_state"}
            assert got["input_ids"].dtype == torch.int64 and torch.equal(got["input_ids"], p.batch.input_ids[r])
            assert got["hidden_state"].dtype == torch.bfloat16 and torch.equal(got["hidden_state"], p.hidden[r])
            want_aux = torch.cat([layer[r] for layer in p.layers], dim=-1)
            assert got["aux_hidden_state"].shape == (n, 3 * H) and torch.equal(got["aux_hidden_state"], want_aux)
            with safe_open(path, "pt") as f:
                assert f.metadata() == {"rid": rid, "tokens": str(n)}
    reason = (tmp_path / "dump" / "e3-2-cccccccccccccccc.error").read_text()
    assert reason.count("\n") == 1 and "prefix cache hit of 128 tokens" in reason and "--disable-radix-cache" in reason


def test_lengths_from_device_tensors_when_the_cpu_lists_are_absent(tmp_path):
    p = packed_batch(REQUESTS[:2])
    p.batch.extend_seq_lens = torch.tensor(p.batch.extend_seq_lens_cpu, dtype=torch.int32)
    p.batch.extend_prefix_lens = torch.tensor(p.batch.extend_prefix_lens_cpu, dtype=torch.int32)
    p.batch.extend_seq_lens_cpu = p.batch.extend_prefix_lens_cpu = None
    hook_for(tmp_path / "d")(p.batch, p.hidden, p.layers)
    got = load_file(tmp_path / "d" / "e3-1-bbbbbbbbbbbbbbbb.safetensors")
    assert torch.equal(got["hidden_state"], p.hidden[5:8])


@pytest.mark.parametrize("mode", [Mode.DECODE, Mode.IDLE, Mode.TARGET_VERIFY])
def test_decode_idle_and_verify_batches_write_nothing(tmp_path, mode):
    p = packed_batch(REQUESTS[:2])
    p.batch.forward_mode = mode
    hook_for(tmp_path / "d")(p.batch, p.hidden, p.layers)
    assert os.listdir(tmp_path / "d") == []


def test_requests_without_our_key_and_other_tp_ranks_write_nothing(tmp_path):
    p = packed_batch([("warmup", 4, 0), ("health-check", 1, 0)])
    hook_for(tmp_path / "a")(p.batch, p.hidden, p.layers)
    assert os.listdir(tmp_path / "a") == []
    p = packed_batch(REQUESTS[:2])
    hook_for(tmp_path / "b", rank=3)(p.batch, p.hidden, p.layers)
    assert os.listdir(tmp_path / "b") == []


def test_a_batch_whose_shapes_disagree_gets_an_error_per_request_not_wrong_slices(tmp_path):
    p = packed_batch(REQUESTS[:2])
    sharded = p.hidden[:4]  # e.g. sequence-parallel rows
    hook_for(tmp_path / "d")(p.batch, sharded, [x[:4] for x in p.layers])
    names = sorted(os.listdir(tmp_path / "d"))
    assert names == ["e3-0-aaaaaaaaaaaaaaaa.error", "e3-1-bbbbbbbbbbbbbbbb.error"]
    assert "shape (4, 8) for a batch of 8 tokens" in (tmp_path / "d" / names[0]).read_text()
    hook_for(tmp_path / "e")(p.batch, p.hidden, None)
    assert "captured no aux hidden states" in (tmp_path / "e" / "e3-0-aaaaaaaaaaaaaaaa.error").read_text()


def test_an_existing_dump_never_gets_an_error_beside_it(tmp_path):
    p = packed_batch([("e3-0-aaaaaaaaaaaaaaaa", 5, 0)])
    hook = hook_for(tmp_path / "d")
    hook(p.batch, p.hidden, p.layers)
    p.batch.extend_prefix_lens_cpu = [5]  # the same rid seen again with a prefix
    hook(p.batch, p.hidden, p.layers)
    assert not (tmp_path / "d" / "e3-0-aaaaaaaaaaaaaaaa.error").exists()


def one_dump_bytes(tmp_path, n: int) -> int:
    p = packed_batch([("e3-9-9999999999999999", n, 0)])
    hook_for(tmp_path / "sizing")(p.batch, p.hidden, p.layers)
    return (tmp_path / "sizing" / "e3-9-9999999999999999.safetensors").stat().st_size


def wait_until(pred, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)  # wait-ok: poll interval of a deadline loop
    raise AssertionError(f"timed out waiting for {what}")


def test_a_full_folder_holds_the_write_until_the_client_deletes_a_dump(tmp_path):
    size = one_dump_bytes(tmp_path, 6)
    folder = tmp_path / "d"
    hook = hook_for(folder, budget=2 * size + ERROR_ROOM + 100, wait=60.0, poll=0.01)
    first = packed_batch([("e3-0-aaaaaaaaaaaaaaaa", 6, 0), ("e3-1-bbbbbbbbbbbbbbbb", 6, 0)], seed=1)
    hook(first.batch, first.hidden, first.layers)
    assert len(list(folder.glob("*.safetensors"))) == 2

    third = packed_batch([("e3-2-cccccccccccccccc", 6, 0)], seed=2)
    started = threading.Event()
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        started.set()
        time.sleep(s)  # wait-ok: the hook's own poll interval, injected to observe the wait

    hook.sleep = sleep
    t = threading.Thread(target=hook, args=(third.batch, third.hidden, third.layers))
    t.start()
    assert started.wait(20), "the hook did not wait for room"
    assert not (folder / "e3-2-cccccccccccccccc.safetensors").exists()
    assert sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) <= hook.config.budget
    (folder / "e3-0-aaaaaaaaaaaaaaaa.safetensors").unlink()  # the client moved it into the store
    t.join(30)
    assert not t.is_alive()
    got = load_file(folder / "e3-2-cccccccccccccccc.safetensors")
    assert torch.equal(got["hidden_state"], third.hidden)
    assert not list(folder.glob("*.error"))


def test_a_folder_that_stays_full_gets_an_error_after_the_wait(tmp_path):
    size = one_dump_bytes(tmp_path, 6)
    folder = tmp_path / "d"
    now = [0.0]
    hook = hook_for(folder, budget=size + ERROR_ROOM + 100, wait=120.0, clock=lambda: now[0],
                    sleep=lambda s: now.__setitem__(0, now[0] + 10.0))
    p = packed_batch([("e3-0-aaaaaaaaaaaaaaaa", 6, 0), ("e3-1-bbbbbbbbbbbbbbbb", 6, 0)])
    hook(p.batch, p.hidden, p.layers)
    assert (folder / "e3-0-aaaaaaaaaaaaaaaa.safetensors").exists()
    reason = (folder / "e3-1-bbbbbbbbbbbbbbbb.error").read_text()
    assert "no room in the dump folder after 120 s" in reason
    assert now[0] >= 120.0
    assert sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) <= hook.config.budget


def test_a_dump_larger_than_the_whole_budget_is_refused_at_once(tmp_path):
    folder = tmp_path / "d"
    hook = hook_for(folder, budget=ERROR_ROOM + 1000, wait=120.0, sleep=lambda s: pytest.fail("waited for room that cannot come"))
    p = packed_batch([("e3-0-aaaaaaaaaaaaaaaa", 64, 0)])
    hook(p.batch, p.hidden, p.layers)
    assert "more than the whole budget" in (folder / "e3-0-aaaaaaaaaaaaaaaa.error").read_text()


def test_no_partial_file_is_ever_visible_under_the_final_name(tmp_path):
    folder = tmp_path / "d"
    hook = hook_for(folder)
    big = packed_batch([("e3-0-aaaaaaaaaaaaaaaa", 20000, 0)], dtype=torch.float32)
    want = (tmp_path / "want")
    hook_for(want)(big.batch, big.hidden, big.layers)
    full = (want / "e3-0-aaaaaaaaaaaaaaaa.safetensors").stat().st_size
    seen = []
    stop = threading.Event()

    def watch():
        final = folder / "e3-0-aaaaaaaaaaaaaaaa.safetensors"
        while not stop.is_set():
            try:
                seen.append(final.stat().st_size)
            except FileNotFoundError:
                pass

    w = threading.Thread(target=watch)
    w.start()
    try:
        hook(big.batch, big.hidden, big.layers)
    finally:
        stop.set()
        w.join(10)
    assert all(s == full for s in seen)
    assert sorted(os.listdir(folder)) == [".eagle3-dump.lock", "e3-0-aaaaaaaaaaaaaaaa.safetensors"]


def test_config_from_the_environment(tmp_path):
    assert DumpConfig.from_env({}) is None
    c = DumpConfig.from_env({"EAGLE3_DUMP_DIR": str(tmp_path / "new"), "EAGLE3_DUMP_BUDGET": "2GB",
                             "EAGLE3_DUMP_WAIT": "30"})
    assert c == DumpConfig(tmp_path / "new", 2 * 10**9, 30.0) and (tmp_path / "new").is_dir()
    d = DumpConfig.from_env({"EAGLE3_DUMP_DIR": str(tmp_path)})
    assert d.budget == 8 * 10**9 and d.wait == 120.0
    with pytest.raises(DumpConfigError, match="EAGLE3_DUMP_BUDGET='lots'"):
        DumpConfig.from_env({"EAGLE3_DUMP_DIR": str(tmp_path), "EAGLE3_DUMP_BUDGET": "lots"})
    with pytest.raises(DumpConfigError, match="EAGLE3_DUMP_WAIT='-1'"):
        DumpConfig.from_env({"EAGLE3_DUMP_DIR": str(tmp_path), "EAGLE3_DUMP_WAIT": "-1"})


class FakeCausalLM:
    """What attach() touches of an SGLang CausalLM: config, model.layers_to_capture and the
    model's own set_eagle3_layers_to_capture (here with deepseek_v2.py's id convention)."""

    def __init__(self, num_layers=61):
        self.config = type("C", (), {"num_hidden_layers": num_layers})()
        self.model = type("M", (), {"layers_to_capture": []})()
        self.capture_aux_hidden_states = False

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        n = self.config.num_hidden_layers
        self.model.layers_to_capture = [2, n // 2, n - 3] if layer_ids is None else list(layer_ids)


def test_attach_sets_the_eagle3_capture_layers_and_refuses_bad_server_settings(tmp_path):
    env = {"EAGLE3_DUMP_DIR": str(tmp_path / "d")}
    assert attach(FakeCausalLM(), env={}) is None
    model = FakeCausalLM(61)
    hook = attach(model, env=env, server_args=type("A", (), {"chunked_prefill_size": -1})(), rank=0)
    assert model.model.layers_to_capture == capture_layers(61) == [2, 30, 58] and hook.layers == [2, 30, 58]
    bad = type("A", (), {"chunked_prefill_size": 8192, "pp_size": 2})()
    with pytest.raises(RuntimeError, match="--chunked-prefill-size -1") as e:
        attach(FakeCausalLM(), env=env, server_args=bad, rank=0)
    assert "pipeline parallelism" in str(e.value)

    class Shifted(FakeCausalLM):
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            super().set_eagle3_layers_to_capture([3, 31, 59])

    with pytest.raises(RuntimeError, match=r"captures layers \[3, 31, 59\].*expected \[2, 30, 58\]"):
        attach(Shifted(), env=env, server_args=None, rank=0)


def test_server_problems_reads_only_what_it_knows():
    assert server_problems(object()) == []
    assert server_problems(type("A", (), {"chunked_prefill_size": None, "disable_radix_cache": True})()) == []
    assert len(server_problems(type("A", (), {"enable_two_batch_overlap": True, "attn_dp_size": 8})())) == 2


def test_an_unexpected_failure_of_one_dump_is_that_requests_error_not_a_dead_server(tmp_path, monkeypatch):
    import pipeline.patch.sglang_dump as dump_module

    real = dump_module.dump_parts

    def flaky(tensors, metadata):
        if metadata["rid"].startswith("e3-1-"):
            raise RuntimeError("serializer exploded")
        return real(tensors, metadata)

    monkeypatch.setattr(dump_module, "dump_parts", flaky)
    p = packed_batch(REQUESTS[:2] + [("e3-3-dddddddddddddddd", 7, 0)])
    hook_for(tmp_path / "d")(p.batch, p.hidden, p.layers)
    assert "RuntimeError: serializer exploded" in (tmp_path / "d" / "e3-1-bbbbbbbbbbbbbbbb.error").read_text()
    assert (tmp_path / "d" / "e3-0-aaaaaaaaaaaaaaaa.safetensors").exists()
    assert (tmp_path / "d" / "e3-3-dddddddddddddddd.safetensors").exists()
