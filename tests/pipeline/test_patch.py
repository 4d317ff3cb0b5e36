"""pipeline.patch: what the injected lines do at run time (on a stand-in CausalLM built from the
very blocks the patcher inserts), and the CLI's answers for files it cannot handle."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sglang_wheel import sglang_source  # noqa: F401  (the fixture)

from pipeline.patch.recipes import (
    FORWARD_ANCHOR,
    FORWARD_BLOCK,
    INIT_ANCHOR,
    INIT_BLOCK,
)

REPO = Path(__file__).resolve().parents[2]


def stand_in_class():
    """A CausalLM shaped like SGLang's at the two anchors, with the patch's blocks after them."""
    source = (
        "class CausalLM:\n"
        "    def __init__(self, num_layers):\n"
        "        self.config = type('C', (), {'num_hidden_layers': num_layers})()\n"
        "        self.model = type('M', (), {'layers_to_capture': []})()\n"
        + INIT_ANCHOR + INIT_BLOCK + "\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        self.capture_aux_hidden_states = True\n"
        "        n = self.config.num_hidden_layers\n"
        "        self.model.layers_to_capture = [2, n // 2, n - 3]\n\n"
        "    def forward(self, forward_batch, packed):\n"
        "        hidden_states = packed\n"
        "        aux_hidden_states = None\n"
        "        if self.capture_aux_hidden_states:\n"
        + FORWARD_ANCHOR + FORWARD_BLOCK + "\n"
        "        return hidden_states\n"
    )
    scope: dict = {}
    exec(compile(source, "<patched stand-in>", "exec"), scope)  # noqa: S102  (our own text, the patch's blocks)
    return scope["CausalLM"]


class Mode:
    def is_extend(self):
        return True

    def is_target_verify(self):
        return False

    def is_idle(self):
        return False


class Batch:
    def __init__(self, rids, lens, ids):
        self.rids, self.extend_seq_lens_cpu, self.input_ids = rids, lens, ids
        self.extend_prefix_lens_cpu = [0] * len(lens)
        self.forward_mode = Mode()


def test_without_a_dump_dir_the_patched_model_behaves_as_before(monkeypatch):
    monkeypatch.delenv("EAGLE3_DUMP_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "pipeline.patch.sglang_dump", None)  # not even needed
    model = stand_in_class()(8)
    assert model._eagle3_dump is None and model.capture_aux_hidden_states is False
    assert model.forward(Batch([], [], None), "h") == "h"


def test_with_a_dump_dir_the_model_captures_the_eagle3_layers_and_dumps_prefill(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE3_DUMP_DIR", str(tmp_path / "dump"))
    model = stand_in_class()(8)
    assert model.capture_aux_hidden_states is True and model.model.layers_to_capture == [2, 4, 5]
    hidden = torch.randn(5, 4, dtype=torch.bfloat16)
    aux = [torch.randn(5, 4, dtype=torch.bfloat16) for _ in range(3)]
    ids = torch.arange(5)
    out = model.forward(Batch(["e3-0-0123456789abcdef", "e3-1-0123456789abcdef"], [2, 3], ids), (hidden, aux))
    assert out is hidden
    got = load_file(tmp_path / "dump" / "e3-1-0123456789abcdef.safetensors")
    assert torch.equal(got["input_ids"], ids[2:]) and torch.equal(got["hidden_state"], hidden[2:])
    assert torch.equal(got["aux_hidden_state"], torch.cat([a[2:] for a in aux], dim=-1))


def test_a_server_that_cannot_import_the_pipeline_stops_at_startup_saying_why(monkeypatch, tmp_path):
    import pipeline.patch

    monkeypatch.setenv("EAGLE3_DUMP_DIR", str(tmp_path / "dump"))
    monkeypatch.setitem(sys.modules, "pipeline.patch.sglang_dump", None)  # an import of it now fails
    monkeypatch.delattr(pipeline.patch, "sglang_dump", raising=False)
    with pytest.raises(RuntimeError, match="EAGLE3_DUMP_DIR is set but pipeline.patch.sglang_dump cannot be imported.*"
                                           "PYTHONPATH"):
        stand_in_class()(8)


def patch_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.patch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_cli_exit_codes_for_what_it_cannot_handle(tmp_path):
    done = patch_cli("apply", "--file", str(tmp_path / "nope.py"))
    assert done.returncode == 2 and "does not exist" in done.stderr and "Traceback" not in done.stderr
    done = patch_cli("verify", "--module", "not_installed_pkg_xyz.models.llama")
    assert done.returncode == 2 and "cannot be found" in done.stderr
    done = patch_cli("status", "--file", str(tmp_path))
    assert done.returncode == 2 and "is a folder" in done.stderr
    assert patch_cli("frobnicate", "--file", "x").returncode == 2
    assert patch_cli("apply").returncode == 2  # --file or --module is required
    (tmp_path / "other.py").write_text("x = 1\n")
    done = patch_cli("status", "--file", str(tmp_path / "other.py"))
    assert done.returncode == 0 and done.stdout.startswith("unknown ") and "sglang 0.5.23" in done.stdout
    assert patch_cli("revert", "--file", str(tmp_path / "other.py")).returncode == 3


def test_an_unwritable_backup_leaves_the_original_untouched_and_exits_4(sglang_source, tmp_path):  # noqa: F811
    target = tmp_path / "llama.py"
    shutil.copyfile(sglang_source / "sglang" / "srt" / "models" / "llama.py", target)
    original = target.read_bytes()
    (tmp_path / "llama.py.eagle3-orig").mkdir()  # something in the backup's way
    done = patch_cli("apply", "--file", str(target))
    assert done.returncode == 4 and "cannot write" in done.stderr
    assert target.read_bytes() == original


def test_revert_of_an_original_is_a_no_op_that_drops_a_stale_backup(sglang_source, tmp_path):  # noqa: F811
    target = tmp_path / "deepseek_v2.py"
    shutil.copyfile(sglang_source / "sglang" / "srt" / "models" / "deepseek_v2.py", target)
    shutil.copyfile(target, tmp_path / "deepseek_v2.py.eagle3-orig")
    done = patch_cli("revert", "--file", str(target))
    assert done.returncode == 0 and done.stdout.startswith("already original")
    assert not (tmp_path / "deepseek_v2.py.eagle3-orig").exists()


def test_the_injected_text_is_small():
    # A reviewer reads what goes into SGLang's files: keep it a few lines.
    added = INIT_BLOCK.count("\n") + FORWARD_BLOCK.count("\n")
    assert added <= 20, textwrap.indent(INIT_BLOCK + FORWARD_BLOCK, "  ")


def test_a_file_patched_by_an_earlier_release_is_outdated_until_applied_again_and_reverts_whole(
        sglang_source, tmp_path):  # noqa: F811
    """The hook moved (pipeline.sglang_dump -> pipeline.patch.sglang_dump): a model file patched
    before the move names a module the server can no longer import, so verify must not pass it."""
    from pipeline.patch.recipes import EARLIER_INIT_BLOCK

    target = tmp_path / "llama.py"
    shutil.copyfile(sglang_source / "sglang" / "srt" / "models" / "llama.py", target)
    original = target.read_bytes()
    assert patch_cli("apply", "--file", str(target)).returncode == 0
    patched = target.read_bytes()
    target.write_bytes(patched.replace(INIT_BLOCK.encode(), EARLIER_INIT_BLOCK.encode()))  # as the earlier apply wrote

    done = patch_cli("verify", "--file", str(target))
    assert done.returncode == 1 and done.stdout.startswith("outdated ") and "apply" in done.stdout, done.stdout
    done = patch_cli("apply", "--file", str(target))
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == patched and b"from pipeline.patch import sglang_dump" in patched
    assert (tmp_path / "llama.py.eagle3-orig").read_bytes() == original
    target.write_bytes(patched.replace(INIT_BLOCK.encode(), EARLIER_INIT_BLOCK.encode()))
    assert patch_cli("revert", "--file", str(target)).returncode == 0
    assert target.read_bytes() == original and not (tmp_path / "llama.py.eagle3-orig").exists()
