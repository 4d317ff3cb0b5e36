"""The EAGLE-3 drafter in plain PyTorch, with SGLang's parameter names.

API (stable; pipeline.train, pipeline.export and pipeline.evaluate build on it):

    cfg = DrafterConfig.from_target(target_config_dict, draft_vocab_size=32000)
    cfg = DrafterConfig.from_sglang(json.load(open("config.json")));  cfg.to_sglang() -> dict
    m = Eagle3Drafter(cfg)
    m.load_embeddings(read_embeddings(target_dir))   # pipeline.target.tensors; frozen, not in state_dict()
    m.set_vocab(vocab.from_counts(counts, cfg.draft_vocab_size))  # fills d2t / t2d
    m.state_dict().keys() == set(EXPORT_KEYS)                      # exactly SGLang's names
    logits, h = m(input_ids, hidden, position_ids, cache=None)    # h alone: m.hidden_out(...)
    m.draft_to_target(draft_ids) -> target ids
    save_drafter(m, folder) / load_drafter(folder)   # config.json + model.safetensors

forward(input_ids [B,T] int64, hidden [B,T,3*Ht] or [B,T,H], position_ids [B,T] or None,
cache=None | KVCache | TTTCache) -> (logits [B,T,Vd] over the DRAFT vocabulary,
hidden_out [B,T,H]).
- A 3*Ht-wide `hidden` (the target's three captured layers) goes through `fc` first; an
  H-wide one is the drafter's own previous `hidden_out` (SGLang does the same width test).
- Row t pairs the embedding of `input_ids[t]` with `hidden[t]`. EAGLE-3 feeds the NEXT
  token: for a target state at position p (having read token p), input_ids holds token p+1.
- `hidden_out` is the pre-norm residual stream (what SGLang carries to the next draft
  step); logits are `lm_head(norm(hidden_out))`. Draft id i is target id `i + d2t[i]`.
- cache=None: causal attention over the T rows (right padding needs no mask).
- KVCache (inference chain drafting): keys/values appended in order; a call with T rows
  attends to everything cached plus its own rows causally; `crop(n)` drops rejected ones.
  Pass position_ids explicitly (absolute positions of the rows). Batch rows share a length.
- TTTCache (training-time test): call 0 runs causal attention over the sequence and keeps
  its keys/values; call i >= 1 (with the previous hidden_out, input_ids shifted left by i
  and position_ids + i) lets row t attend to call 0's keys at positions <= t plus row t's
  own key of calls 1..i: what the chain sees at inference after i drafted tokens.

Decoder layer (SGLang llama_eagle3): residual = hidden; x = [input_layernorm(embed) ;
hidden_norm(hidden)] (2H); h = residual + o_proj(attn(x)); out = h + mlp(post_attention_layernorm(h)).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.atomic_io import write_json_atomic
from pipeline.compiled_ops import CompiledOps
from pipeline.drafter.config import EXPORT_KEYS, DrafterConfig, DrafterConfigError
from pipeline.drafter.ttt_attention import EAGER_MERGE, causal_plus_diagonal, flash_supported, score_matrix
from pipeline.drafter.vocab import DraftVocab

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        if cfg.hidden_act not in ("silu", "swish"):
            raise ValueError(f"hidden_act {cfg.hidden_act!r} is not supported (SGLang's drafter uses silu)")
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    if groups == 1:
        return x
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, groups, t, d).reshape(b, h * groups, t, d)


class KVCache:
    """Inference cache: post-rope keys and values of every row seen, in position order."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else int(self.k.shape[2])

    def crop(self, length: int) -> None:
        if self.k is not None and self.v is not None:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
        past = self.length
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        t, s = q.shape[2], self.k.shape[2]
        mask = None
        if t > 1:
            mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(diagonal=past)
        return F.scaled_dot_product_attention(q, _expand_kv(self.k, groups), _expand_kv(self.v, groups), attn_mask=mask)


class TTTCache:
    """Training-time-test cache: call 0's keys over the sequence, then one diagonal key per call.
    Calls >= 1 go through ttt_attention's flash merge (its elementwise parts `merge`'s, compiled
    in training), or its written-out score matrix where flash attention is not available."""

    def __init__(self, merge: CompiledOps = EAGER_MERGE) -> None:
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.merge = merge

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
        k, v = _expand_kv(k, groups), _expand_kv(v, groups)
        self.k.append(k)
        self.v.append(v)
        if len(self.k) == 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scale = 1.0 / math.sqrt(q.shape[-1])
        if flash_supported(q):
            return causal_plus_diagonal(q, self.k[0], self.v[0], self.k[1:], self.v[1:], scale, self.merge)
        return score_matrix(q, self.k, self.v, scale)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.groups = self.heads // self.kv_heads
        inp = 2 * cfg.hidden_size
        self.q_proj = nn.Linear(inp, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(inp, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(inp, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | TTTCache | None) -> torch.Tensor:
        return self.o_proj(self.attend(*self.project(x, cos, sin), cache))

    def project(self, x: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [B, heads, T, D], rope applied to q and k."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               cache: KVCache | TTTCache | None) -> torch.Tensor:
        """The attention's output [B, T, heads * D], before o_proj."""
        b, _, t, _ = q.shape
        if cache is None:
            out = F.scaled_dot_product_attention(q, _expand_kv(k, self.groups), _expand_kv(v, self.groups),
                                                 is_causal=True)
        else:
            out = cache.attend(q, k, v, self.groups)
        return out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | TTTCache | None) -> torch.Tensor:
        q, k, v = self.before_attention(embeds, hidden, cos, sin)
        return self.after_attention(hidden, self.self_attn.attend(q, k, v, cache))

    def before_attention(self, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor,
                         sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer up to its attention (norms, projections, rope): one of the two halves training
        compiles around the attention, whose TTT cache keeps Python state."""
        x = torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)
        return self.self_attn.project(x, cos, sin)

    def after_attention(self, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = hidden + self.self_attn.o_proj(attn)
        return h + self.mlp(self.post_attention_layernorm(h))


def _llama3_inv_freq(inv_freq: torch.Tensor, p: dict) -> torch.Tensor:
    """Llama 3.1's frequency-dependent scaling (the same rule transformers and SGLang apply)."""
    factor, low, high = float(p["factor"]), float(p.get("low_freq_factor", 1.0)), float(p.get("high_freq_factor", 4.0))
    old_len = float(p["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(is_mid, mid, scaled)


class Rotary(nn.Module):
    """cos/sin for the target's rope settings. default, linear and llama3 are computed here;
    any other rope_type goes through transformers' table of rope initialisers."""

    inv_freq: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        p = cfg.rope_parameters()
        kind = p.get("rope_type", "default")
        self.scaling = 1.0
        dim = cfg.head_dim
        inv_freq = 1.0 / (float(p["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        if kind == "linear":
            inv_freq = inv_freq / float(p["factor"])
        elif kind == "llama3":
            inv_freq = _llama3_inv_freq(inv_freq, p)
        elif kind != "default":
            from transformers import LlamaConfig
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

            if kind not in ROPE_INIT_FUNCTIONS:
                raise ValueError(f"rope_type {kind!r} is not known to transformers")
            lc = LlamaConfig(hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads,
                             num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                             max_position_embeddings=cfg.max_position_embeddings, rope_parameters=p)
            inv_freq, self.scaling = ROPE_INIT_FUNCTIONS[kind](lc, None)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.scaling, emb.sin() * self.scaling


class Eagle3Drafter(nn.Module):
    embed_tokens: torch.Tensor  # buffers, registered in __init__
    d2t: torch.Tensor
    t2d: torch.Tensor

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.register_buffer("embed_tokens", torch.empty(config.vocab_size, h), persistent=False)
        self.fc = nn.Linear(3 * config.input_hidden_size, h, bias=False)
        self.midlayer = DecoderLayer(config)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.rotary = Rotary(config)
        self.embeddings_loaded = False

    def load_embeddings(self, weight: torch.Tensor) -> None:
        """The target's [vocab, hidden] embedding, frozen (a buffer: no grad, not exported)."""
        want = (self.config.vocab_size, self.config.hidden_size)
        if tuple(weight.shape) != want:
            raise ValueError(f"target embedding has shape {tuple(weight.shape)}, the drafter expects {want}")
        self.embed_tokens = weight.detach().to(device=self.fc.weight.device).clone()
        self.embeddings_loaded = True

    def set_vocab(self, vocab: DraftVocab) -> None:
        if vocab.size != self.config.draft_vocab_size or vocab.t2d.numel() != self.config.vocab_size:
            raise ValueError(f"draft vocabulary of {vocab.size} over {vocab.t2d.numel()} tokens does not fit a "
                             f"drafter of {self.config.draft_vocab_size} over {self.config.vocab_size}")
        self.d2t.copy_(vocab.d2t)
        self.t2d.copy_(vocab.t2d)

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor | None = None,
                cache: KVCache | TTTCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.hidden_out(input_ids, hidden, position_ids, cache)
        return self.lm_head(self.norm(out)), out

    def hidden_out(self, input_ids: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor | None = None,
                   cache: KVCache | TTTCache | None = None) -> torch.Tensor:
        """forward's second result without its logits (training scores only some rows' logits)."""
        b, t = input_ids.shape
        if not torch.is_autocast_enabled(hidden.device.type):
            hidden = hidden.to(self.fc.weight.dtype)  # under autocast bf16 goes straight into the matmuls
        if hidden.shape[-1] != self.config.hidden_size:
            hidden = self.fc(hidden)
        if position_ids is None:
            start = cache.length if isinstance(cache, KVCache) else 0
            position_ids = torch.arange(start, start + t, device=input_ids.device).expand(b, t)
        embeds = F.embedding(input_ids, self.embed_tokens).to(hidden.dtype)
        cos, sin = self.rotary(hidden, position_ids)
        return self.midlayer(embeds, hidden, cos.to(hidden.dtype), sin.to(hidden.dtype), cache)


def save_drafter(model: Eagle3Drafter, folder: Path) -> None:
    """config.json (SGLang's dict) and model.safetensors (EXPORT_KEYS) into `folder`."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    write_json_atomic(folder / CONFIG_FILE, model.config.to_sglang())


def load_drafter(folder: Path, map_location: str | torch.device = "cpu") -> Eagle3Drafter:
    """A drafter from save_drafter's files (embeddings not included: call load_embeddings)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = DrafterConfig.from_sglang(json.loads((folder / CONFIG_FILE).read_text()), where=str(folder / CONFIG_FILE))
    model = Eagle3Drafter(cfg)
    state = load_file(str(folder / WEIGHTS_FILE), device=str(map_location))
    missing = [k for k in EXPORT_KEYS if k not in state]
    if missing:
        raise ValueError(f"{folder / WEIGHTS_FILE}: missing {', '.join(missing)}")
    wrong = cfg.shape_problems({k: v.shape for k, v in state.items()}, folder / WEIGHTS_FILE, folder / CONFIG_FILE)
    if wrong:  # one line naming the file, not load_state_dict's list of mismatches
        raise DrafterConfigError(wrong[0] + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""))
    model.load_state_dict(state)
    return model.to(map_location)
