"""The drafter's shape, read from the target's config.json and written as SGLang's config.json.

SGLang builds `LlamaForCausalLMEagle3` from a plain Llama config with one hidden layer, a
`draft_vocab_size`, and the target's rope settings. The rope keys are copied exactly as the
target spells them (transformers 5: `rope_parameters`; older: `rope_scaling` + `rope_theta`),
because SGLang reads whichever is present and a silently dropped scaling rule makes drafts
wrong at long positions while short prompts still look fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.program_edge import BadInput
from pipeline.target.config import text_config

ARCHITECTURE = "LlamaForCausalLMEagle3"
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")
SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
OWN_FIELDS = ("draft_vocab_size", "target_hidden_size", "rope", "vocab_size", "max_position_embeddings")
"""What `unlike_target` leaves out: the draft vocabulary is training's choice, and export's check
compares vocabulary, positions and rope key by key as the target spells them."""
MAX_VOCAB = 4_000_000
MAX_HIDDEN = 65_536


class DrafterConfigError(BadInput):
    """A config dict that cannot describe a drafter; str() names the key and the value."""


def _positive_int(cfg: dict, key: str, where: str, bound: int = MAX_VOCAB) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= bound:
        raise DrafterConfigError(f"{where}: key {key!r} must be an integer in 1..{bound}, got {v!r}")
    return v


EXPORT_KEYS = (
    "fc.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
)
"""SGLang's names for the drafter's tensors, the exported file's every key; here, beside the shapes
that go with them, where reading a folder's names needs no torch."""


@dataclass(frozen=True)
class DrafterConfig:
    """One Llama decoder layer over [embedding ; hidden] (qkv take 2H), fc: 3*target_hidden -> H,
    lm_head over `draft_vocab_size` tokens. `rope` holds the target's rope keys verbatim."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    hidden_act: str = "silu"
    target_hidden_size: int | None = None  # None: same as hidden_size
    rope: dict[str, Any] = field(default_factory=lambda: {"rope_theta": 10000.0})

    def __post_init__(self) -> None:
        if self.hidden_size % 2 or self.head_dim % 2:
            raise DrafterConfigError(f"hidden_size {self.hidden_size} and head_dim {self.head_dim} must be even")
        if self.num_attention_heads % self.num_key_value_heads:
            raise DrafterConfigError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}")
        if not 0 < self.draft_vocab_size <= self.vocab_size:
            raise DrafterConfigError(
                f"draft_vocab_size {self.draft_vocab_size} must be in 1..vocab_size ({self.vocab_size})")
        if not any(k in self.rope for k in ROPE_KEYS):
            raise DrafterConfigError(f"rope settings {self.rope!r} name none of {', '.join(ROPE_KEYS)}")

    @property
    def input_hidden_size(self) -> int:
        """Width of one captured target layer (fc takes three of them)."""
        return self.target_hidden_size or self.hidden_size

    @classmethod
    def from_target(cls, target_cfg: dict, draft_vocab_size: int, where: str = "target config.json") -> DrafterConfig:
        """The drafter for a target: same width, heads, MLP size and rope; one layer."""
        t = text_config(target_cfg)
        hidden = _positive_int(t, "hidden_size", where, MAX_HIDDEN)
        heads = _positive_int(t, "num_attention_heads", where, 4096)
        kv = t.get("num_key_value_heads") or heads
        head_dim = t.get("head_dim") or hidden // heads
        rope = {k: t[k] for k in ROPE_KEYS if t.get(k) is not None}
        if not rope:
            rope = {"rope_theta": 10000.0}
        return cls(
            hidden_size=hidden,
            intermediate_size=_positive_int(t, "intermediate_size", where, 16 * MAX_HIDDEN),
            num_attention_heads=heads,
            num_key_value_heads=int(kv),
            head_dim=int(head_dim),
            vocab_size=_positive_int(t, "vocab_size", where),
            draft_vocab_size=min(int(draft_vocab_size), t["vocab_size"]),
            rms_norm_eps=float(t.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(t.get("max_position_embeddings") or 4096),
            hidden_act=str(t.get("hidden_act", "silu")),
            target_hidden_size=None,
            rope=rope,
        )

    def to_sglang(self) -> dict[str, Any]:
        """The config.json dict SGLang's llama_eagle3 loader reads (export adds eagle_config)."""
        d: dict[str, Any] = {
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": self.hidden_act,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
        }
        d.update(self.rope)
        if self.target_hidden_size and self.target_hidden_size != self.hidden_size:
            d["target_hidden_size"] = self.target_hidden_size
        return d

    @classmethod
    def from_sglang(cls, d: dict, where: str = "config.json") -> DrafterConfig:
        """Inverse of to_sglang (unknown keys such as eagle_config are ignored)."""
        arch = d.get("architectures")
        if arch != [ARCHITECTURE]:
            raise DrafterConfigError(f"{where}: key 'architectures' must be [{ARCHITECTURE!r}], got {arch!r}")
        if d.get("num_hidden_layers") != 1:
            raise DrafterConfigError(f"{where}: key 'num_hidden_layers' must be 1, got {d.get('num_hidden_layers')!r}")
        vocab = _positive_int(d, "vocab_size", where)
        return cls(
            hidden_size=_positive_int(d, "hidden_size", where, MAX_HIDDEN),
            intermediate_size=_positive_int(d, "intermediate_size", where, 16 * MAX_HIDDEN),
            num_attention_heads=_positive_int(d, "num_attention_heads", where, 4096),
            num_key_value_heads=_positive_int(d, "num_key_value_heads", where, 4096),
            head_dim=_positive_int(d, "head_dim", where, 4096),
            vocab_size=vocab,
            draft_vocab_size=_positive_int(d, "draft_vocab_size", where) if d.get("draft_vocab_size") else vocab,
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=_positive_int(d, "max_position_embeddings", where, 1 << 24),
            hidden_act=str(d.get("hidden_act", "silu")),
            target_hidden_size=d.get("target_hidden_size"),
            rope={k: d[k] for k in ROPE_KEYS if d.get(k) is not None},
        )

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every exported tensor (EXPORT_KEYS) of a drafter of this config:
        what its config.json promises model.safetensors holds."""
        h, i, v, vd = self.hidden_size, self.intermediate_size, self.vocab_size, self.draft_vocab_size
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attn, mlp = "midlayer.self_attn.", "midlayer.mlp."
        return {"fc.weight": (h, 3 * self.input_hidden_size), attn + "q_proj.weight": (q, 2 * h),
                attn + "k_proj.weight": (kv, 2 * h), attn + "v_proj.weight": (kv, 2 * h),
                attn + "o_proj.weight": (h, q), "midlayer.input_layernorm.weight": (h,),
                "midlayer.hidden_norm.weight": (h,), "midlayer.post_attention_layernorm.weight": (h,),
                mlp + "gate_proj.weight": (i, h), mlp + "up_proj.weight": (i, h), mlp + "down_proj.weight": (h, i),
                "norm.weight": (h,), "lm_head.weight": (vd, h), "d2t": (vd,), "t2d": (v,)}

    def shape_problems(self, shapes: dict[str, Any], weights: object, config: object) -> list[str]:
        """One line for each tensor whose shape (in `shapes`, as a safetensors header or a state
        dict gives it) is not the one this config promises; names missing from `shapes` are
        another check's."""
        out = []
        for name, want in self.weight_shapes().items():
            got = shapes.get(name)
            if got is not None and tuple(got) != want:
                out.append(f"{weights}: {name} has shape {list(got)}, but {config} describes {list(want)} "
                           f"(hidden_size {self.hidden_size}, intermediate_size {self.intermediate_size}, "
                           f"{self.num_attention_heads}/{self.num_key_value_heads} heads of {self.head_dim}, "
                           f"vocab_size {self.vocab_size}, draft_vocab_size {self.draft_vocab_size})")
        return out

    def unlike_target(self, target_cfg: dict, where: str = "target config.json") -> list[tuple[str, Any, Any]]:
        """(field, this config's value, the target's) where this drafter is not the one training
        builds for `target_cfg` (its width, MLP, heads, head size, norm, activation): a lie that
        keeps every shape (twice the heads of half the size) still loads, and computes
        something else. DrafterConfigError when the target's config describes no drafter."""
        want = DrafterConfig.from_target(target_cfg, self.draft_vocab_size, where=where)
        return [(f.name, getattr(self, f.name), getattr(want, f.name)) for f in fields(self)
                if f.name not in OWN_FIELDS and getattr(self, f.name) != getattr(want, f.name)]

    def rope_parameters(self) -> dict[str, Any]:
        """The rope settings in transformers 5's single-dict form (what LlamaRotaryEmbedding reads)."""
        if isinstance(self.rope.get("rope_parameters"), dict):
            params = dict(self.rope["rope_parameters"])
        else:
            params = dict(self.rope.get("rope_scaling") or {})
            if "type" in params and "rope_type" not in params:
                params["rope_type"] = params.pop("type")
            params.setdefault("rope_theta", self.rope.get("rope_theta", 10000.0))
        params.setdefault("rope_type", "default")
        params.setdefault("rope_theta", 10000.0)
        return params
