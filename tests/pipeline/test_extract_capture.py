"""What extraction writes is what the target computes at the EAGLE-3 capture points."""

from __future__ import annotations

import hashlib
import json

import torch
from safetensors import safe_open


def _reference_forward(model, input_ids: torch.Tensor, layers: list[int]):
    """Inputs of the given decoder layers and the final norm's output, seen through hooks."""
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for n in layers:
        def pre(module, args, kwargs, n=n):
            seen[f"in{n}"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
        handles.append(model.model.layers[n].register_forward_pre_hook(pre, with_kwargs=True))
    handles.append(model.model.norm.register_forward_hook(lambda m, a, out: seen.__setitem__("norm", out.detach().clone())))
    try:
        with torch.no_grad():
            model(input_ids=input_ids[None])
    finally:
        for h in handles:
            h.remove()
    aux = torch.cat([seen[f"in{n}"][0] for n in layers], dim=-1)
    return aux, seen["norm"][0]


def test_aux_and_final_states_equal_what_hooks_on_the_target_see(reference_store, tiny_target, tiny_data, xt):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_target, dtype=torch.float32).eval()
    L = xt.NUM_LAYERS
    layers = [2, L // 2, L - 3]
    store = xt.load_store(reference_store)
    assert len(store) == len(tiny_data.records)
    for i, rec in enumerate(tiny_data.records):
        t = store[f"rows_0/{i}.safetensors"]
        ids = torch.tensor(rec["input_ids"])
        assert torch.equal(t["input_ids"], ids)
        assert torch.equal(t["loss_mask"], torch.tensor(rec["loss_mask"], dtype=torch.uint8))
        aux, final = _reference_forward(model, ids, layers)
        assert t["aux_hidden_state"].shape == (len(ids), 3 * xt.HIDDEN)
        assert t["aux_hidden_state"].dtype == torch.float32
        torch.testing.assert_close(t["aux_hidden_state"], aux, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(t["hidden_state"], final, rtol=1e-5, atol=1e-5)


def test_store_has_meta_manifest_and_plain_safetensors(reference_store, tiny_target, tiny_data, xt):
    meta = json.loads((reference_store / "meta.json").read_text())
    assert meta["target"] == str(tiny_target)
    assert meta["num_layers"] == xt.NUM_LAYERS and meta["hidden_size"] == xt.HIDDEN
    assert meta["capture_layers"] == [2, 4, 5]
    assert meta["dtype"] == "float32"
    assert meta["dataset"] == str(tiny_data.path)
    assert meta["dataset_sha256"] == hashlib.sha256(tiny_data.path.read_bytes()).hexdigest()
    assert meta["world_size"] == 1

    lines = (reference_store / "manifest.jsonl").read_text().splitlines()
    entries = [json.loads(x) for x in lines]
    assert [e["index"] for e in entries] == list(range(len(tiny_data.records)))
    for e, rec in zip(entries, tiny_data.records):
        path = reference_store / e["file"]
        assert e["id"] == rec["id"] and e["tokens"] == len(rec["input_ids"])
        assert e["bytes"] == path.stat().st_size
        with safe_open(path, framework="pt") as f:
            assert sorted(f.keys()) == ["aux_hidden_state", "hidden_state", "input_ids", "loss_mask"]
    assert xt.store_files(reference_store) == sorted(
        ["manifest.jsonl", "meta.json"] + [f"rows_0/{i}.safetensors" for i in range(len(tiny_data.records))]
    )


def test_events_report_progress_and_the_store(reference_store, tiny_data):
    from pipeline.events import iter_events

    events = list(iter_events(reference_store.parent / "events.jsonl"))
    progress = [e for e in events if e.kind == "progress"]
    assert progress, "no progress events"
    last = progress[-1]
    total_tokens = sum(len(r["input_ids"]) for r in tiny_data.records)
    assert (last.get("done"), last.get("total"), last.get("unit")) == (len(tiny_data.records), len(tiny_data.records), "samples")
    assert last.get("tokens") == total_tokens
    store_bytes = sum(p.stat().st_size for p in reference_store.glob("rows_*/*.safetensors"))
    assert last.get("bytes_written") == store_bytes
    assert last.get("tokens_per_s") > 0
    artifacts = [e for e in events if e.kind == "artifact"]
    assert [a.get("path") for a in artifacts] == [str(reference_store)]
    assert artifacts[0].get("bytes") == store_bytes


def _capture_pair(tiny_target, xt, **kw):
    """(final, aux) of the tiny target on a fixed right-padded batch, through a Capturer."""
    from transformers import AutoModelForCausalLM

    from pipeline.capture import Capturer

    model = AutoModelForCausalLM.from_pretrained(tiny_target, dtype=torch.float32).eval()
    L = xt.NUM_LAYERS
    logs: list[str] = []
    cap = Capturer(model, [2, L // 2, L - 3], L, "cpu", log=logs.append, **kw)
    ids = torch.randint(0, xt.VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    final, aux, bad = cap.forward(ids, [12, 9])
    return cap, model, ids, final, aux, bad, logs


def test_a_failed_compilation_is_a_warning_event_the_console_counts(tiny_target, xt, tmp_path, monkeypatch):
    from pipeline.events import iter_events

    def broken(gm, example_inputs):
        raise RuntimeError("no triton here")

    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events))
    monkeypatch.delenv("RANK", raising=False)
    *_, logs = _capture_pair(tiny_target, xt, compile=True, compile_backend=broken)
    assert logs[0].startswith("extract: warning: torch.compile of the decoder layers failed")
    warned = [e.get("text") for e in iter_events(events) if e.kind == "message" and e.get("level") == "warning"]
    assert len(warned) == 1 and warned[0] == logs[0].removeprefix("extract: warning: ")


def test_a_capturer_leaves_cudnns_attention_out_of_sdpas_choice(tiny_target, xt, cudnn_sdp):
    # cuDNN builds a plan for every new batch length: 77 ms of a 156 ms online training step on an H100
    _capture_pair(tiny_target, xt)
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled()


def test_hooks_capture_the_layer_inputs_without_keeping_every_layers_states(tiny_target, xt):
    cap, model, ids, final, aux, bad, _ = _capture_pair(tiny_target, xt)
    assert not cap.compiled  # CPU: eager unless asked
    L = xt.NUM_LAYERS
    with torch.no_grad():
        ref = model.model(input_ids=ids, output_hidden_states=True)
    want = torch.cat([ref.hidden_states[i] for i in (2, L // 2, L - 3)], dim=-1)
    torch.testing.assert_close(aux, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, ref.last_hidden_state, rtol=1e-5, atol=1e-5)
    assert bad.tolist() == [False, False]


def test_compiled_layers_keep_the_hooks_and_give_the_same_states(tiny_target, xt):
    _, _, _, final0, aux0, _, _ = _capture_pair(tiny_target, xt)
    # The "eager" dynamo backend traces each layer's forward (as on CUDA) without a C++ compiler.
    cap, _, _, final, aux, _, logs = _capture_pair(tiny_target, xt, compile=True, compile_backend="eager")
    assert cap.compiled and not logs
    torch.testing.assert_close(aux, aux0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, final0, rtol=1e-5, atol=1e-5)


def test_a_failed_compilation_falls_back_to_eager_with_a_warning(tiny_target, xt):
    def broken(gm, example_inputs):
        raise RuntimeError("no triton here")

    _, _, _, final0, aux0, _, _ = _capture_pair(tiny_target, xt)
    cap, _, _, final, aux, _, logs = _capture_pair(tiny_target, xt, compile=True, compile_backend=broken)
    assert not cap.compiled
    assert len(logs) == 1 and "torch.compile of the decoder layers failed" in logs[0] and "--no-compile" in logs[0]
    torch.testing.assert_close(aux, aux0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, final0, rtol=1e-5, atol=1e-5)
