"""The configs we ship load cleanly: an operator's first `eagle3 check` must never be a
config error in our own file."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import main
from console.core.config.loader import load_config

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_config_loads_and_reports_status(path: Path, tmp_path: Path, capsys) -> None:
    cfg = load_config(path)
    assert cfg.phases and len({p.id for p in cfg.phases}) == len(cfg.phases)
    sets = []
    if "data" in cfg.vars:
        sets = ["--set", f"data={tmp_path}"]
    elif "workdir" in cfg.vars:
        sets = ["--set", f"workdir={tmp_path}"]
    assert main(["status", str(path), "--json", *sets]) == 0
    assert '"phases"' in capsys.readouterr().out


def test_demo_exercises_the_phase_features_production_uses():
    demo = load_config(CONFIGS[0].parent / "demo.yaml")
    kinds = {c.kind for p in demo.phases for c in (*p.checks, *p.verify)}
    assert {"fresh", "free_space", "jsonl_records", "json_matches", "exists"} <= kinds
    assert any(p.confirm for p in demo.phases)
    assert [p.id for p in demo.phases][:5] == ["demo-assets", "regenerate", "merge", "clean", "extract"]


def test_demo_merge_reads_what_regenerate_wrote_instead_of_raw_arithmetic():
    from pipeline.merge.options import build_parser as merge_parser
    from pipeline.regenerate.options import parse

    demo = load_config(CONFIGS[0].parent / "demo.yaml")
    regen = parse(list(demo.phase("regenerate").argv[3:]))
    assert regen.backend == "hf" and regen.temperature == 0 and regen.limit == 400 and regen.max_new_tokens == 24
    args = merge_parser().parse_args(list(demo.phase("merge").argv[3:]))
    assert regen.out in [Path(s) for s in args.sources] and args.exclude == ["arithmetic"]
    assert "regenerate" in demo.phase("merge").needs
