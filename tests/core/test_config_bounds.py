"""A hostile or broken config ends in exit 2 and `file:line: key` at once: alias bombs,
interpolation bombs, deep nesting and unknown tags never spin, allocate or crash. And
argv items of `run:` reach the phase exactly as written, whatever YAML 1.1 thinks they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console.core.config.loader import load_config

GUARD_S = 20  # a hang guard only; the loader answers in well under a second


def eagle3_check(cfg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console.cli", "check", str(cfg)],
                          capture_output=True, text=True, timeout=GUARD_S)


def alias_bomb() -> str:
    lines = ["vars:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    lines += ["phases:", "  - id: x", "    run: [true]"]
    return "\n".join(lines) + "\n"


def interpolation_bomb() -> str:
    lines = ["vars:", "  v0: xxxxxxxxxx"]
    for i in range(1, 10):
        lines.append(f"  v{i}: \"" + f"${{v{i - 1}}}" * 20 + "\"")
    lines += ["phases:", "  - id: x", "    run: [echo, \"${v9}\"]"]
    return "\n".join(lines) + "\n"


def deep_nesting() -> str:
    return "phases:\n  - id: x\n    run: [true]\n    env: " + "[" * 5000 + "]" * 5000 + "\n"


def wide_bomb() -> str:
    """A 60 KB variable in 1,000 items, aliased 90 times: each value is in bounds, the sum is 5 GB."""
    items = ", ".join(['"${v}"'] * 1000)
    lines = ["vars:", "  v: " + "x" * 60_000, "phases:", "  - id: x", f"    run: &r [echo, {items}]"]
    lines += [f"  - id: y{i}\n    run: *r" for i in range(89)]
    return "\n".join(lines) + "\n"


CASES = {
    "wide-interpolation": (wide_bomb(), ":5: phases.x.run[", "expands to more than"),
    "alias-bomb": (alias_bomb(), ":7: vars.f[0]", "alias bomb"),
    "interpolation-bomb": (interpolation_bomb(), ":5: vars.v3", "expands to more than"),
    "deep-nesting": (deep_nesting(), ":4: phases[0].env", "nested more than"),
    "unknown-tag": ("name: !foo x\nphases:\n  - id: x\n    run: [true]\n", ":1: name", "tag !foo"),
    "python-tag": ("phases:\n  - id: x\n    run: [true]\n    env: {A: !!python/object/apply:os.system [echo]}\n",
                   ":4: phases[0].env.A", "python/object/apply"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_config_exits_2_naming_line_and_key(tmp_path, case):
    text, where, what = CASES[case]
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    done = eagle3_check(cfg)
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert f"bad.yaml{where}" in out and what in out, out
    assert "Traceback" not in out


def test_yaml_1_1_scalars_in_run_and_env_are_passed_as_written(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("vars:\n  ver: 1.10\nphases:\n  - id: x\n"
                   "    run: [chmod, 0755, yes, on, ~, 1.10, 1e3, 0x1F, \"${ver}\", 2026-01-02]\n"
                   "    env: {MODE: 0755, FLAG: off}\n"
                   "  - id: y\n    run: yes no 0755\n")
    c = load_config(cfg)
    assert c.phase("x").argv == ("chmod", "0755", "yes", "on", "~", "1.10", "1e3", "0x1F", "1.10", "2026-01-02")
    assert c.phase("x").env == {"MODE": "0755", "FLAG": "off"}
    assert c.phase("y").argv == ("yes", "no", "0755")


def test_anchors_and_aliases_of_normal_size_still_work(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("phases:\n  - id: x\n    run: [true]\n    env: &e {A: '1'}\n"
                   "  - id: y\n    run: [true]\n    env: *e\n")
    assert load_config(cfg).phase("y").env == {"A": "1"}


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    cfg = tmp_path / "big.yaml"
    with open(cfg, "wb") as f:
        f.truncate(64 * 2**20)
    done = eagle3_check(cfg)
    assert done.returncode == 2 and "big.yaml: is 67108864 bytes" in done.stderr, done.stderr
