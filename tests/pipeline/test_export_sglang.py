"""An exported drafter against SGLang 0.5.23's own loader, read from the wheel.

sglang cannot be imported here (CUDA kernels), so its model files are read as text: the
module tree of `LlamaForCausalLMEagle3` is walked statically (AST) to get the parameter
names SGLang creates, and then the real `load_weights` source is executed against those
names with our exported tensors. A name that no branch maps is silently dropped by SGLang;
a parameter no name reaches keeps its random init (lm_head: acceptance 1.00). Both fail here.
"""

from __future__ import annotations

import ast
import json
import sys
import typing
from pathlib import Path

import pytest
import torch

from pipeline.drafter import EXPORT_KEYS
from pipeline.export import folder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang_wheel import sglang_source  # noqa: E402,F401  (the fixture)
from test_export import make_export

EAGLE3 = "sglang/srt/models/llama_eagle3.py"
LLAMA = "sglang/srt/models/llama.py"
SPEC_AUX = "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
# Module classes whose only parameter (for our configs: no bias) is `weight`.
WEIGHTED = {"RMSNorm", "QKVParallelLinear", "RowParallelLinear", "MergedColumnParallelLinear",
            "ColumnParallelLinear", "ReplicatedLinear", "ParallelLMHead", "VocabParallelEmbedding",
            "Linear", "Embedding"}


@pytest.fixture(scope="module")
def sglang_files(sglang_source) -> dict[str, str]:  # noqa: F811
    """Source text of the SGLang files these tests read, from the wheel's unpacked source."""
    return {name: (sglang_source / name).read_text() for name in (EAGLE3, LLAMA, SPEC_AUX)}


# ---- a static model of SGLang's module tree -------------------------------------------------

def _classes(source: str) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}


def _callee(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _self_path(target: ast.AST) -> list[str] | None:
    """`self.a.b` -> ["a", "b"]."""
    parts = []
    while isinstance(target, ast.Attribute):
        parts.append(target.attr)
        target = target.value
    return parts[::-1] if isinstance(target, ast.Name) and target.id == "self" and parts else None


class ModuleTree:
    """Parameter names of a class, from the `self.x = Module(...)` assignments of __init__."""

    def __init__(self, files: list[dict[str, ast.ClassDef]]) -> None:
        self.files = files  # searched in order; a class whose base has its own name is looked up further on

    def _lookup(self, name: str, start: int = 0) -> tuple[int, ast.ClassDef] | None:
        for i in range(start, len(self.files)):
            if name in self.files[i]:
                return i, self.files[i][name]
        return None

    @staticmethod
    def _assignments(body: list[ast.stmt]):
        """(self path, value) of every `self.a.b = value` in source order, branches included."""
        for stmt in body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                path = _self_path(stmt.targets[0])
                if path:
                    yield path, stmt.value
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    yield from ModuleTree._assignments(inner)

    def params(self, name: str, start: int = 0) -> dict[str, bool]:
        """{parameter name: optional}; optional when a branch assigns None to its module instead."""
        if name in WEIGHTED:
            return {"weight": False}
        found = self._lookup(name, start)
        if found is None:
            return {}
        where, cls = found
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            return {}
        out: dict[str, bool] = {}
        if "super().__init__(" in ast.unparse(init):
            for base in cls.bases:
                base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
                if base_name:
                    out.update(self.params(base_name, where + 1 if base_name == name else where))
        assigned = list(self._assignments(init.body))
        maybe_none = {".".join(p) for p, v in assigned if isinstance(v, ast.Constant) and v.value is None}
        for path, value in assigned:
            prefix = ".".join(path)
            callee = _callee(value)
            if callee == "ModuleList" and value.args and isinstance(value.args[0], ast.ListComp):
                comp = value.args[0]
                copies = 1 if "num_hidden_layers" in ast.unparse(comp.generators[0].iter) else 3
                sub = {f"{i}.{k}": o for i in range(copies) for k, o in self.params(_callee(comp.elt) or "").items()}
            elif callee is not None:
                sub = self.params(callee)
            else:
                continue  # an alias (self.lm_head = self.model.embed_tokens) or a plain value
            if not sub:
                continue  # a function result or a module without parameters (rope, attention backend)
            for k in [k for k in out if k == prefix or k.startswith(prefix + ".")]:
                del out[k]
            for k, opt in sub.items():
                out[f"{prefix}.{k}"] = opt or prefix in maybe_none
        return out


def sglang_params(files: dict[str, str]) -> dict[str, bool]:
    tree = ModuleTree([_classes(files[EAGLE3]), _classes(files[LLAMA])])
    return tree.params("LlamaForCausalLMEagle3")


class _Param:
    def __init__(self, name: str, loaded: dict) -> None:
        self.name, self.loaded = name, loaded

    def weight_loader(self, param, tensor, shard=None):
        self.loaded.setdefault(self.name, []).append((shard, tuple(tensor.shape)))


def run_load_weights(files: dict[str, str], params: dict[str, bool], weights: dict[str, torch.Tensor]):
    """SGLang's own load_weights, executed on a stand-in holding the statically found params."""
    cls = _classes(files[EAGLE3])["LlamaForCausalLMEagle3"]
    fn = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "load_weights")
    module = ast.Module(body=[fn], type_ignores=[])
    loaded: dict[str, list] = {}

    def default_weight_loader(param, tensor, shard=None):
        param.weight_loader(param, tensor, shard)

    env = {"torch": torch, "default_weight_loader": default_weight_loader, **vars(typing)}
    code = compile(ast.fix_missing_locations(module), EAGLE3, "exec")
    exec(code, env)  # noqa: S102 - SGLang's own loader code, read from its wheel, run on a stand-in

    class Standin:
        hot_token_id = None

        def named_parameters(self):
            return [(n, _Param(n, loaded)) for n in params]

    model = Standin()
    env["load_weights"](model, iter(weights.items()))
    return loaded, model.hot_token_id


# ---- tests ------------------------------------------------------------------------------------

def test_static_model_of_sglang_finds_the_drafter_parameters(sglang_files):
    params = sglang_params(sglang_files)
    must = {"model.fc.weight", "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.mlp.gate_up_proj.weight", "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
            "model.layers.0.hidden_norm.weight", "model.norm.weight", "model.embed_tokens.weight", "lm_head.weight"}
    assert must <= set(params), sorted(must - set(params))
    assert params["model.input_norm.weight"] and params["model.fc_norm.0.weight"]  # only with norm_before_fc / fc_norm


def test_every_exported_weight_lands_on_a_sglang_parameter_and_none_is_left_random(tmp_path, sglang_files):
    out, _target, drafter = make_export(tmp_path)
    from safetensors.torch import load_file

    weights = load_file(str(out / folder.WEIGHTS_FILE))
    assert set(weights) == set(EXPORT_KEYS)
    params = sglang_params(sglang_files)
    loaded, hot = run_load_weights(sglang_files, params, weights)

    # every name reached a parameter (or is the vocabulary map SGLang consumes itself)
    consumed = {"d2t", "t2d"}
    shards = sum(len(v) for v in loaded.values())
    assert shards == len(weights) - len(consumed), (sorted(weights), loaded)
    # every parameter but the shared target embedding and the optional norms received a tensor
    needed = {n for n, optional in params.items() if not optional and n != "model.embed_tokens.weight"}
    assert needed == set(loaded), f"left at random init: {sorted(needed - set(loaded))}"
    assert sorted(s for s, _ in loaded["model.layers.0.self_attn.qkv_proj.weight"]) == ["k", "q", "v"]
    assert sorted(s for s, _ in loaded["model.layers.0.mlp.gate_up_proj.weight"]) == [0, 1]
    assert loaded["lm_head.weight"] == [(None, (drafter.config.draft_vocab_size, drafter.config.hidden_size))]
    # SGLang's draft-to-target map is ours
    assert torch.equal(hot, torch.arange(drafter.config.draft_vocab_size) + drafter.d2t)


def test_a_missing_lm_head_is_exactly_what_sglang_would_leave_random(tmp_path, sglang_files):
    out, _target, _drafter = make_export(tmp_path)
    from safetensors.torch import load_file

    weights = load_file(str(out / folder.WEIGHTS_FILE))
    del weights["lm_head.weight"]
    params = sglang_params(sglang_files)
    loaded, _ = run_load_weights(sglang_files, params, weights)
    assert "lm_head.weight" not in loaded  # SGLang loads silently: the refusal must be ours


def _config_reads(source: str, classes: set[str] | None) -> set[str]:
    """`config.X` (or `self.config.X`) read without a default, outside branches guarded by getattr of X or model_type."""
    tree = ast.parse(source)
    roots = [n for n in tree.body if isinstance(n, ast.ClassDef) and (classes is None or n.name in classes)]
    keys: set[str] = set()

    def visit(node: ast.AST, guards: str) -> None:
        if isinstance(node, ast.If):
            visit(node.test, guards)
            g = guards + ast.unparse(node.test)
            for child in node.body:
                visit(child, g)
            for child in node.orelse:
                visit(child, guards)
            return
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) \
                and ast.unparse(node.value) in ("config", "self.config") \
                and repr(node.attr) not in guards and "model_type" not in guards:
            keys.add(node.attr)
        for child in ast.iter_child_nodes(node):
            visit(child, guards)

    for r in roots:
        visit(r, "")
    return keys


def test_config_has_every_key_sglang_reads_without_a_default(tmp_path, sglang_files):
    out, target, _ = make_export(tmp_path)
    cfg = json.loads((out / folder.CONFIG_FILE).read_text())
    reads = _config_reads(sglang_files[EAGLE3], None)
    reads |= _config_reads(sglang_files[LLAMA], {"LlamaDecoderLayer", "LlamaAttention", "LlamaMLP"})
    assert {"draft_vocab_size", "tie_word_embeddings", "hidden_size", "num_attention_heads"} <= reads
    assert not reads - set(cfg), f"SGLang reads {sorted(reads - set(cfg))} from config.json"
    # the target's layers to capture: SGLang's spec_aux_hidden_state reads exactly these eagle_config keys
    spec = sglang_files[SPEC_AUX]
    assert '"eagle_aux_hidden_state_layer_ids"' in spec and '"use_aux_hidden_state"' in spec
    assert set(cfg["eagle_config"]) == {"eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state"}
    assert "[val + 1 for val in layer_ids]" in sglang_files[LLAMA]  # why the ids are one below capture layers
    t = json.loads((target / "config.json").read_text())
    n = t["num_hidden_layers"]
    assert [i + 1 for i in cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]] == [2, n // 2, n - 3]
