"""The drafter model: SGLang's names and config, and attention that matches inference."""

from __future__ import annotations

import pytest
import torch

from pipeline.drafter import (
    EXPORT_KEYS,
    DrafterConfig,
    DrafterConfigError,
    Eagle3Drafter,
    KVCache,
    TTTCache,
)
from pipeline.drafter import vocab as dvocab
from pipeline.drafter.model import load_drafter, save_drafter

TARGET_CFG = {
    "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}


def tiny_drafter(seed: int = 0, **overrides) -> Eagle3Drafter:
    torch.manual_seed(seed)
    cfg = DrafterConfig.from_target({**TARGET_CFG, **overrides}, draft_vocab_size=64)
    m = Eagle3Drafter(cfg)
    m.load_embeddings(torch.randn(cfg.vocab_size, cfg.hidden_size))
    m.set_vocab(dvocab.from_counts(torch.randint(0, 50, (cfg.vocab_size,)), cfg.draft_vocab_size))
    return m.eval()


def test_state_dict_holds_exactly_the_names_sglang_loads_and_no_embedding():
    m = tiny_drafter()
    assert sorted(m.state_dict()) == sorted(EXPORT_KEYS)
    sd = m.state_dict()
    assert sd["fc.weight"].shape == (32, 96)
    assert sd["midlayer.self_attn.q_proj.weight"].shape == (32, 64)  # qkv read [embed ; hidden]
    assert sd["midlayer.self_attn.k_proj.weight"].shape == (16, 64)
    assert sd["lm_head.weight"].shape == (64, 32)
    assert sd["d2t"].dtype == torch.int64 and sd["t2d"].dtype == torch.bool and sd["t2d"].shape == (128,)
    assert not any(p is m.embed_tokens for p in m.parameters())


def test_config_round_trips_through_sglang_dict_keeping_rope_spelling():
    new = DrafterConfig.from_target(TARGET_CFG, 64)
    d = new.to_sglang()
    assert d["architectures"] == ["LlamaForCausalLMEagle3"] and d["num_hidden_layers"] == 1
    assert d["rope_parameters"] == TARGET_CFG["rope_parameters"] and "rope_theta" not in d
    assert DrafterConfig.from_sglang(d) == new

    legacy = {**TARGET_CFG, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}
    del legacy["rope_parameters"]
    old = DrafterConfig.from_target(legacy, 64)
    d = old.to_sglang()
    assert d["rope_scaling"] == legacy["rope_scaling"] and d["rope_theta"] == 500000.0
    assert "rope_parameters" not in d
    assert DrafterConfig.from_sglang(d) == old
    assert old.rope_parameters()["rope_type"] == "llama3"
    # the llama3 scaling changes the low frequencies, so it really reaches the rotary
    m_old, m_new = Eagle3Drafter(old), Eagle3Drafter(new)
    assert not torch.allclose(m_old.rotary.inv_freq, m_new.rotary.inv_freq)


@pytest.mark.parametrize("rope", [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
])
def test_rotary_matches_transformers_llama(rope):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = DrafterConfig.from_target({**TARGET_CFG, "rope_parameters": rope}, 64)
    ours = Eagle3Drafter(cfg).rotary
    theirs = LlamaRotaryEmbedding(LlamaConfig(hidden_size=32, num_attention_heads=4, head_dim=8,
                                              max_position_embeddings=256, rope_parameters=dict(rope)))
    x, pos = torch.zeros(1, 300, 8), torch.arange(300)[None]
    for a, b in zip(ours(x, pos), theirs(x, pos)):
        assert torch.allclose(a, b, atol=1e-5)


def test_config_caps_draft_vocab_at_the_target_vocab_and_rejects_bad_sglang_dicts():
    assert DrafterConfig.from_target(TARGET_CFG, 32000).draft_vocab_size == 128
    d = DrafterConfig.from_target(TARGET_CFG, 64).to_sglang()
    with pytest.raises(DrafterConfigError, match="architectures"):
        DrafterConfig.from_sglang({**d, "architectures": ["LlamaForCausalLM"]})
    with pytest.raises(DrafterConfigError, match="hidden_size"):
        DrafterConfig.from_sglang({**d, "hidden_size": "32"})


def test_kv_cache_in_chunks_equals_one_causal_pass():
    m = tiny_drafter()
    ids, hid = torch.randint(0, 128, (2, 10)), torch.randn(2, 10, 96)
    full, _ = m(ids, hid)
    cache = KVCache()
    a, _ = m(ids[:, :6], hid[:, :6], cache=cache)
    b, _ = m(ids[:, 6:], hid[:, 6:], cache=cache)
    assert torch.allclose(torch.cat([a, b], 1), full, atol=1e-5)
    cache.crop(4)
    assert cache.length == 4


def test_training_time_test_step_sees_what_the_inference_chain_sees():
    """Row t of TTT call i must equal drafting i tokens after position t with a KV cache."""
    m = tiny_drafter(seed=3)
    b, t = 1, 12
    ids, hid = torch.randint(0, 128, (b, t + 3)), torch.randn(b, t, 96)
    pos = torch.arange(t).expand(b, t)
    ttt = TTTCache()
    hs = [hid]
    logits = []
    for i in range(3):
        lg, h = m(ids[:, i:i + t], hs[-1], pos + i, cache=ttt)
        logits.append(lg)
        hs.append(h)
    for row in (0, 5, t - 1):
        cache = KVCache()
        m(ids[:, :row + 1], hid[:, :row + 1], pos[:, :row + 1], cache=cache)
        h_prev = hs[1][:, row:row + 1]
        for i in (1, 2):
            lg, h_prev = m(ids[:, row + i:row + i + 1], h_prev, pos[:, row:row + 1] + i, cache=cache)
            assert torch.allclose(lg[:, 0], logits[i][:, row], atol=1e-5), (row, i)


@pytest.mark.parametrize("steps", [1, 3])
def test_flash_merge_of_ttt_attention_equals_the_score_matrix_in_values_and_gradients(monkeypatch, steps):
    """The merge that trains on GPU (flash over step 0's keys + one key per later step) must
    give the outputs and gradients of the written-out [T, T+i] softmax it replaces, at every
    step (one diagonal key, then several: its keys are stacked; test_train_objective runs it
    compiled)."""
    import pipeline.drafter.model as model

    torch.manual_seed(5)
    b, heads, t, d = 2, 4, 23, 8
    q = torch.randn(b, heads, t, d, dtype=torch.float64)
    kv = [(torch.randn(b, 2, t, d, dtype=torch.float64), torch.randn(b, 2, t, d, dtype=torch.float64))
          for _ in range(steps + 1)]
    grad = torch.randn(b, heads, t, d, dtype=torch.float64)

    def run(flash: bool):
        monkeypatch.setattr(model, "flash_supported", lambda _q: flash)
        leaves = [x.clone().requires_grad_() for pair in kv for x in pair] + [q.clone().requires_grad_()]
        cache = TTTCache()
        outs = [cache.attend(leaves[-1], leaves[2 * j], leaves[2 * j + 1], groups=2) for j in range(steps + 1)]
        out = torch.stack(outs)
        return out, torch.autograd.grad(out, leaves, grad.expand_as(out))

    ref, ref_grads = run(False)
    got, got_grads = run(True)
    assert torch.allclose(got, ref, atol=1e-5)
    for g_ref, g_got in zip(ref_grads, got_grads):
        assert torch.allclose(g_got, g_ref, atol=1e-5)
    assert ref_grads[2 * steps].abs().sum() > 0  # the newest diagonal key gets a gradient


def test_a_flash_merge_that_disagrees_with_the_score_matrix_is_not_used(monkeypatch):
    """flash attention's private ops can change between torch releases: a merge that no
    longer matches the definition must fall back, with a warning, before it trains anything."""
    from pipeline.drafter import ttt_attention

    monkeypatch.setattr(ttt_attention, "_checked", {})
    real = ttt_attention._flash_forward

    def off_by_a_bit(q, k, v, scale):
        out, lse, aux = real(q, k, v, scale)
        return out * 1.01, lse, aux

    monkeypatch.setattr(ttt_attention, "_flash_forward", off_by_a_bit)
    with pytest.warns(RuntimeWarning, match="differs from the score matrix"):
        assert not ttt_attention.flash_supported(torch.zeros(1, 2, 5, 16))
    monkeypatch.setattr(ttt_attention, "_checked", {})
    monkeypatch.setattr(ttt_attention, "_flash_forward", real)
    assert ttt_attention.flash_supported(torch.zeros(1, 2, 5, 16))


def test_draft_vocab_keeps_most_frequent_tokens_with_offsets_to_target_ids():
    counts = torch.zeros(20, dtype=torch.int64)
    counts[[3, 7, 11, 19]] = torch.tensor([5, 9, 5, 1])
    v = dvocab.from_counts(counts, 3)
    assert v.ids.tolist() == [3, 7, 11]
    assert (torch.arange(3) + v.d2t).tolist() == [3, 7, 11]
    assert v.t2d.nonzero().flatten().tolist() == [3, 7, 11]
    assert v.coverage == pytest.approx(19 / 20)
    assert torch.equal(dvocab.from_buffers(v.d2t, v.t2d).ids, v.ids)


def test_save_and_load_round_trip(tmp_path):
    m = tiny_drafter(seed=5)
    save_drafter(m, tmp_path / "d")
    back = load_drafter(tmp_path / "d")
    assert back.config == m.config
    for k, v in m.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def test_target_embedding_and_head_are_read_alone_from_safetensors(tiny_target, tmp_path):
    from safetensors.torch import load_file

    from pipeline.target import tensors

    weights = load_file(str(tiny_target / "model.safetensors"))
    assert torch.equal(tensors.read_embeddings(tiny_target), weights["model.embed_tokens.weight"])
    assert torch.equal(tensors.read_lm_head(tiny_target), weights["lm_head.weight"])

    from transformers import LlamaConfig, LlamaForCausalLM

    tied = tmp_path / "tied"
    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, tie_word_embeddings=True)).save_pretrained(tied)
    assert torch.equal(tensors.read_lm_head(tied), tensors.read_embeddings(tied))
    (tmp_path / "empty").mkdir()
    with pytest.raises(tensors.TargetWeightsError, match="safetensors"):
        tensors.read_lm_head(tmp_path / "empty")
