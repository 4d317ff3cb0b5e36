"""What a valid config turns into: what every later part relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from console.core.config import composer
from console.core.config.loader import load_config

CFG = """\
name: demo
vars:
  workdir: ./work
  data: ${workdir}/data
  dataset: ${data}/merged/train.jsonl
  home: ${env:EAGLE3_TEST_HOME}
  literal: "$${not_a_var}"
state_dir: ${workdir}/state
volumes: [${workdir}, /dev/shm]
phases:
  - id: merge
    title: Merge and shuffle
    run: [python, -m, pipeline.merge, --out, "${dataset}"]
    env: {OMP_NUM_THREADS: 4}
    checks:
      - exists: ${data}/raw
      - contains: {path: scripts/extract.py, pattern: "synth_100k"}
        severity: warning
        name: extract-reads-new-dataset
    inputs: ["${data}/raw"]
    outputs: ["${dataset}"]
  - id: extract
    run: python -m pipeline.extract --data '${dataset}' --home ${home}
    needs: [merge]
    verify:
      - jsonl_records: {path: "${dataset}", min: 1}
  - id: serve
    kind: service
    run: [sleep, "100"]
    ready: [{http_ok: "http://127.0.0.1:30000/health"}]
  - id: cleanup
    run: [rm, -rf, "${workdir}/old"]
    confirm: true
"""


def write(tmp_path: Path, text: str = CFG) -> Path:
    p = tmp_path / "cfg" / "demo.yaml"
    p.parent.mkdir()
    p.write_text(text)
    return p


def test_interpolation_nested_env_and_escape(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_TEST_HOME", "/home/op")
    cfg = load_config(write(tmp_path))
    assert cfg.vars["dataset"] == "./work/data/merged/train.jsonl"
    assert cfg.vars["home"] == "/home/op"
    assert cfg.vars["literal"] == "${not_a_var}"
    merge = cfg.phase("merge")
    assert merge.argv[-1] == "./work/data/merged/train.jsonl"
    assert merge.env == {"OMP_NUM_THREADS": "4"}
    assert merge.checks[0].arg == "./work/data/raw"
    assert merge.checks[1].name == "extract-reads-new-dataset"
    assert merge.checks[1].severity == "warning"


def test_paths_resolve_against_config_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_TEST_HOME", "/h")
    p = write(tmp_path)
    cfg = load_config(p)
    root = p.parent.resolve()
    assert cfg.root == root
    assert cfg.state_dir == (root / "work" / "state").resolve()
    assert cfg.volumes[0] == root / "work" and cfg.volumes[1] == Path("/dev/shm")
    assert cfg.phase("merge").outputs == (root / "work/data/merged/train.jsonl",)
    assert cfg.resolve("scripts/x.py") == root / "scripts/x.py"


def test_run_string_is_split_like_a_shell_never_run_by_one_and_a_value_stays_one_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_TEST_HOME", "/h o")
    cfg = load_config(write(tmp_path))
    assert cfg.phase("extract").argv == (
        "python", "-m", "pipeline.extract", "--data", "./work/data/merged/train.jsonl", "--home", "/h o")


def test_set_overrides_a_variable_and_everything_using_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_TEST_HOME", "/h")
    p = write(tmp_path)
    base = load_config(p)
    cfg = load_config(p, {"workdir": "/scratch/w"})
    assert cfg.vars["dataset"] == "/scratch/w/data/merged/train.jsonl"
    assert cfg.state_dir == Path("/scratch/w/state")
    assert cfg.fingerprint != base.fingerprint


def test_phase_kinds_needs_confirm_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_TEST_HOME", "/h")
    cfg = load_config(write(tmp_path))
    assert [p.id for p in cfg.phases] == ["merge", "extract", "serve", "cleanup"]
    assert cfg.phase("serve").kind == "service" and cfg.phase("serve").ready[0].kind == "http_ok"
    assert cfg.phase("extract").needs == ("merge",)
    assert cfg.phase("cleanup").confirm is True
    assert cfg.phase("extract").title == "extract"
    assert cfg.phase("merge").checks[0].line == 16


def test_parallel_defaults_to_one_and_takes_a_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_TEST_HOME", "/h")
    p = write(tmp_path)
    assert load_config(p).parallel == 1
    p.write_text(CFG.replace("state_dir:", "vars2: x\nstate_dir:").replace("vars2: x\n", "parallel: ${jobs}\n")
                 .replace("vars:\n", "vars:\n  jobs: '3'\n"))
    assert load_config(p).parallel == 3
    assert load_config(p, {"jobs": "8"}).parallel == 8


CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").rglob("*.yaml"))


def _tree(node: yaml.Node) -> tuple:
    """A composed node as everything the loader reads of it: kind, tag, where, style and value."""
    mark = (node.start_mark.line, node.start_mark.column)
    if isinstance(node, yaml.ScalarNode):
        return ("scalar", node.tag, mark, node.style or None, node.value)  # libyaml writes plain as ""
    if isinstance(node, yaml.MappingNode):
        return ("mapping", node.tag, mark, node.flow_style, [(_tree(k), _tree(v)) for k, v in node.value])
    return ("sequence", node.tag, mark, node.flow_style, [_tree(v) for v in node.value])


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_libyaml_composes_each_shipped_config_as_the_python_parser_does(path, monkeypatch):
    """The loader composes with libyaml where PyYAML has it (a sixth of the Python parser's time):
    the same nodes, lines and columns, and so the same config."""
    text = path.read_text()
    fast_loader, fast = composer.compose(path, text)
    fast_loader.dispose()
    fast_config = load_config(path)
    monkeypatch.setattr(composer, "_FAST", None)
    slow_loader, slow = composer.compose(path, text)
    slow_loader.dispose()
    assert isinstance(fast_loader, yaml.CSafeLoader) and isinstance(slow_loader, yaml.SafeLoader)
    assert _tree(fast) == _tree(slow)
    assert load_config(path) == fast_config
