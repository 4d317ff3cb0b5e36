"""The dump patch on the real SGLang 0.5.23 files (from the wheel; sglang_wheel.py says where
it comes from): the patcher CLI end to end, and where the injected lines land."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import py_compile
import shutil
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file
from sglang_wheel import sglang_source  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
FILES = {"deepseek_v2.py": "DeepseekV2ForCausalLM", "llama.py": "LlamaForCausalLM"}


def patch_cli(action: str, *where: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.patch", action, *where], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(params=sorted(FILES))
def model_file(request, sglang_source, tmp_path) -> Path:  # noqa: F811
    """A private copy of one model file of the wheel."""
    src = sglang_source / "sglang" / "srt" / "models" / request.param
    dst = tmp_path / request.param
    shutil.copyfile(src, dst)
    return dst


def test_apply_verify_compile_reapply_revert_on_the_real_file(model_file, tmp_path):
    original = model_file.read_bytes()
    assert patch_cli("status", "--file", str(model_file)).stdout.startswith("original sglang 0.5.23 ")
    assert patch_cli("verify", "--file", str(model_file)).returncode == 1

    done = patch_cli("apply", "--file", str(model_file))
    assert done.returncode == 0, done.stderr
    patched = model_file.read_bytes()
    assert patched != original
    assert (tmp_path / f"{model_file.name}.eagle3-orig").read_bytes() == original
    assert patch_cli("verify", "--file", str(model_file)).returncode == 0
    py_compile.compile(str(model_file), cfile=str(tmp_path / "out.pyc"), doraise=True)

    again = patch_cli("apply", "--file", str(model_file))
    assert again.returncode == 0 and again.stdout.startswith("already patched")
    assert model_file.read_bytes() == patched

    back = patch_cli("revert", "--file", str(model_file))
    assert back.returncode == 0, back.stderr
    assert hashlib.sha256(model_file.read_bytes()).digest() == hashlib.sha256(original).digest()
    assert model_file.read_bytes() == original
    assert not (tmp_path / f"{model_file.name}.eagle3-orig").exists()


def test_a_modified_original_is_refused_naming_the_supported_versions(model_file):
    text = model_file.read_bytes().replace(b"self.capture_aux_hidden_states = False",
                                           b"self.capture_aux_hidden_states = False  # local tweak", 1)
    model_file.write_bytes(text)
    done = patch_cli("apply", "--file", str(model_file))
    assert done.returncode == 3
    assert "sglang 0.5.23 deepseek_v2.py" in done.stderr and "sglang 0.5.23 llama.py" in done.stderr
    assert model_file.read_bytes() == text
    assert patch_cli("status", "--file", str(model_file)).stdout.startswith("unknown ")


def test_a_patched_file_edited_by_hand_is_neither_verified_nor_reverted(model_file):
    assert patch_cli("apply", "--file", str(model_file)).returncode == 0
    edited = model_file.read_bytes() + b"\n# edited after patching\n"
    model_file.write_bytes(edited)
    assert patch_cli("verify", "--file", str(model_file)).returncode == 1
    done = patch_cli("revert", "--file", str(model_file))
    assert done.returncode == 3 and ".eagle3-orig" in done.stderr
    assert model_file.read_bytes() == edited


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls}.{name} not found")


def _mentions(node: ast.AST, attr: str) -> list[int]:
    return [n.lineno for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == attr]


def test_the_hook_lands_in_the_causal_lm_between_unpacking_and_the_logits(model_file):
    assert patch_cli("apply", "--file", str(model_file)).returncode == 0
    tree = ast.parse(model_file.read_text(encoding="utf-8"))
    cls = FILES[model_file.name]
    init = _method(tree, cls, "__init__")
    assert _mentions(init, "_eagle3_dump"), "__init__ does not attach the dump hook"
    forward = _method(tree, cls, "forward")
    hook_lines = [n.lineno for n in ast.walk(forward) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and n.func.attr == "_eagle3_dump"]
    unpack = min(_mentions(forward, "capture_aux_hidden_states"))
    logits = min(_mentions(forward, "logits_processor"))
    assert len(hook_lines) == 1 and unpack < hook_lines[0] < logits
    # The hook is called outside the `if self.capture_aux_hidden_states:` block, at the
    # forward's own level, so its condition is the hook and nothing else.
    top = [n for n in forward.body if isinstance(n, ast.If) and "_eagle3_dump" in ast.unparse(n.test)]
    assert len(top) == 1


def test_the_module_is_found_without_importing_sglang(sglang_source, tmp_path):  # noqa: F811
    # A copy of the package whose __init__ would fail if imported, on this interpreter's path.
    site = tmp_path / "site"
    (site / "sglang" / "srt" / "models").mkdir(parents=True)
    (site / "sglang" / "srt" / "models" / "llama.py").write_bytes(
        (sglang_source / "sglang" / "srt" / "models" / "llama.py").read_bytes())
    for pkg in ("sglang", "sglang/srt", "sglang/srt/models"):
        (site / pkg / "__init__.py").write_text("raise RuntimeError('sglang was imported')\n")
    env = {"PYTHONPATH": f"{REPO}:{site}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pipeline.patch", "apply", "--module", "sglang.srt.models.llama"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert str(site / "sglang" / "srt" / "models" / "llama.py") in done.stdout
    done = subprocess.run([sys.executable, "-m", "pipeline.patch", "verify", "--module", "sglang.srt.models.llama"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr


# -- the real patched classes, with SGLang's own imports stubbed ---------------------------------
# SGLang cannot be installed here, but its model files can be imported with every `sglang.*`
# (and GPU-kernel) module replaced by a stub. Then the real, patched __init__ and forward of
# LlamaForCausalLM and DeepseekV3ForCausalLM run around a stand-in inner model: this shows the
# injected lines attach the hook, set the capture layers through the model's own method, and hand
# the hook the states the logits processor gets.

STUBBED = ("sglang", "sgl_kernel", "sgl_kernel_npu", "aiter", "torch_npu")


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=f"{cls.__name__}.{name}")


class _Any(metaclass=_AnyMeta):
    """What a capitalised name of a stub module is: a class (models subclass some of them)."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=name)

    def __call__(self, *args, **kwargs):
        return mock.MagicMock()


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _AnyMeta(name, (_Any,), {}) if name[:1].isupper() else mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in STUBBED else None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def sglang_stubbed(chunked_prefill_size=-1):
    """SGLang's modules stubbed, except the runtime settings attach() reads (TP rank, resolved
    server settings), which answer like a TP-rank-0 extraction server. Leaves sys.modules as it
    found it."""
    import transformers  # noqa: F401  (imported for real before the stubs are in place)

    before = set(sys.modules)
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    runtime = _StubModule("sglang.srt.runtime_context")
    parallel = mock.MagicMock(name="parallel", tp_rank=0, pp_size=1, attn_dp_size=1, enable_dp_attention=False,
                              enable_layernorm_sp=False)
    runtime.get_parallel = lambda: parallel
    runtime.get_schedule = lambda: types.SimpleNamespace(chunked_prefill_size=chunked_prefill_size)
    runtime.get_memory = lambda: types.SimpleNamespace(disable_radix_cache=True)
    runtime.get_exec = lambda: types.SimpleNamespace(overlap=types.SimpleNamespace(enable_two_batch_overlap=False))
    sys.modules["sglang.srt.runtime_context"] = runtime
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            del sys.modules[name]


def load_patched(sglang_source, tmp_path, name):  # noqa: F811
    path = tmp_path / name
    shutil.copyfile(sglang_source / "sglang" / "srt" / "models" / name, path)
    assert patch_cli("apply", "--file", str(path)).returncode == 0
    spec = importlib.util.spec_from_file_location(f"patched_{name[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Mode:
    def is_extend(self):
        return True

    def is_target_verify(self):
        return False

    def is_idle(self):
        return False


def real_aux_module(sglang_source):  # noqa: F811
    """SGLang's own aux collectors (layers/aux_hidden_states.py needs only torch)."""
    path = sglang_source / "sglang" / "srt" / "layers" / "aux_hidden_states.py"
    spec = importlib.util.spec_from_file_location("real_aux_hidden_states", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def packed_prefill(hidden_size):
    """Two requests (5 and 3 tokens) packed into one extend batch."""
    ids = torch.arange(100, 108)
    batch = types.SimpleNamespace(rids=["e3-0-00000000000000aa", "e3-1-00000000000000bb"], forward_mode=Mode(),
                                  extend_seq_lens_cpu=[5, 3], extend_prefix_lens_cpu=[0, 0], input_ids=ids)
    hidden = torch.randn(8, hidden_size, dtype=torch.bfloat16)
    layers = [torch.randn(8, hidden_size, dtype=torch.bfloat16) for _ in range(3)]
    return batch, hidden, layers


def check_dumps(folder, batch, hidden, layers):
    got = load_file(folder / "e3-1-00000000000000bb.safetensors")
    assert torch.equal(got["input_ids"], batch.input_ids[5:])
    assert torch.equal(got["hidden_state"], hidden[5:])
    assert torch.equal(got["aux_hidden_state"], torch.cat([x[5:] for x in layers], dim=-1))
    assert load_file(folder / "e3-0-00000000000000aa.safetensors")["hidden_state"].shape == (5, hidden.shape[1])


def test_patched_llama_for_causal_lm_dumps_what_its_logits_processor_gets(sglang_source, tmp_path,  # noqa: F811
                                                                          monkeypatch):
    from transformers import LlamaConfig

    monkeypatch.setenv("EAGLE3_DUMP_DIR", str(tmp_path / "dump"))
    with sglang_stubbed():
        mod = load_patched(sglang_source, tmp_path, "llama.py")
        mod.get_pp_indices = lambda *a, **k: (0, 8)
        mod.make_pp_layers = lambda *a, **k: (torch.nn.ModuleList(), 0, 8)
        model = mod.LlamaForCausalLM(LlamaConfig(num_hidden_layers=8, hidden_size=16, num_attention_heads=4, vocab_size=64))
        assert model.capture_aux_hidden_states is True and model.model.layers_to_capture == [2, 4, 5]
        batch, hidden, layers = packed_prefill(16)
        aux = real_aux_module(sglang_source).AuxHiddenStateList()  # what LlamaModel.forward collects into
        for x in layers:
            aux.capture(x)
        model.model.forward = lambda *a, **k: (hidden, aux)
        seen = []
        model.logits_processor = lambda input_ids, h, head, fb, a: seen.append((h, a)) or "logits"
        assert model.forward(batch.input_ids, None, batch) == "logits"
    assert seen[0][0] is hidden
    check_dumps(tmp_path / "dump", batch, hidden, layers)


def test_patched_deepseek_v3_for_causal_lm_dumps_what_its_logits_processor_gets(sglang_source, tmp_path,  # noqa: F811
                                                                                monkeypatch):
    monkeypatch.setenv("EAGLE3_DUMP_DIR", str(tmp_path / "dump"))
    batch, hidden, layers = packed_prefill(16)
    packer = real_aux_module(sglang_source).AuxHiddenStatePacker

    class Inner(torch.nn.Module):  # DeepseekV2Model's place: packs its captures as it does
        def __init__(self, *args, **kwargs):
            super().__init__()
            self.layers_to_capture = []

        def forward(self, *args, **kwargs):
            aux = packer(len(self.layers_to_capture))
            for x in layers:
                aux.capture(x)
            return hidden, aux.finalize()

    config = types.SimpleNamespace(num_hidden_layers=61, hidden_size=16, vocab_size=64, q_lora_rank=None,
                                   tie_word_embeddings=False)
    with sglang_stubbed():
        mod = load_patched(sglang_source, tmp_path, "deepseek_v2.py")
        mod.DeepseekV2Model = Inner
        model = mod.DeepseekV3ForCausalLM(config)
        assert model.capture_aux_hidden_states is True and model.model.layers_to_capture == [2, 30, 58]
        seen = []
        model.logits_processor = lambda input_ids, h, head, fb, a: seen.append((h, a)) or "logits"
        # Kimi-K2.5's wrapper calls it with input_ids=None (managers/mm_utils.py:886)
        assert model.forward(None, None, batch) == "logits"
    assert seen[0][0] is hidden
    check_dumps(tmp_path / "dump", batch, hidden, layers)


def test_a_patched_server_with_chunked_prefill_stops_at_startup(sglang_source, tmp_path, monkeypatch):  # noqa: F811
    from transformers import LlamaConfig

    monkeypatch.setenv("EAGLE3_DUMP_DIR", str(tmp_path / "dump"))
    with sglang_stubbed(chunked_prefill_size=8192):
        mod = load_patched(sglang_source, tmp_path, "llama.py")
        mod.get_pp_indices = lambda *a, **k: (0, 8)
        mod.make_pp_layers = lambda *a, **k: (torch.nn.ModuleList(), 0, 8)
        with pytest.raises(RuntimeError, match=r"chunked prefill is on \(--chunked-prefill-size 8192\)"):
            mod.LlamaForCausalLM(LlamaConfig(num_hidden_layers=8, hidden_size=16, num_attention_heads=4,
                                             vocab_size=64))
