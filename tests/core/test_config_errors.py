"""A corpus of config mistakes an operator makes. Each must exit 2 with one message that
names the file, the line and the key, and never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import main

GOOD_PHASE = """
  - id: merge
    run: [python, -c, "print(1)"]
"""

CASES = [
    # (id, yaml text, expected key substring, expected message substring, line or None)
    ("yaml-syntax", "name: x\nphases:\n  - id: a\n   run: [x]\n", "", "YAML syntax error", 4),
    ("empty-file", "", "", "empty", None),
    ("top-not-mapping", "- a\n- b\n", "", "expected a mapping", 1),
    ("unknown-top-key", "name: x\nphase:\n  - id: a\n    run: x\n", "phase", "did you mean 'phases'", 2),
    ("missing-phases", "name: x\nvars: {a: b}\n", "phases", "missing", None),
    ("empty-phases", "name: x\nphases: []\n", "phases", "empty", 2),
    ("phase-missing-id", "name: x\nphases:\n  - run: [a]\n", "phases[0]", "missing `id:`", 3),
    ("bad-phase-id", "name: x\nphases:\n  - id: Merge_1\n    run: [a]\n", "phases[0].id", "not a valid phase id", 3),
    ("duplicate-phase-id", "name: x\nphases:\n  - id: a\n    run: [a]\n  - id: a\n    run: [b]\n",
     "phases[1].id", "duplicate phase id 'a'", 5),
    ("unknown-phase-key", "name: x\nphases:\n  - id: a\n    run: [a]\n    chekcs: []\n",
     "phases.a.chekcs", "did you mean 'checks'", 5),
    ("missing-run", "name: x\nphases:\n  - id: a\n    title: A\n", "phases.a.run", "missing", 3),
    ("empty-run", "name: x\nphases:\n  - id: a\n    run: []\n", "phases.a.run", "empty", 4),
    ("unbalanced-quote", "name: x\nphases:\n  - id: a\n    run: \"python -c 'print(1)\"\n",
     "phases.a.run", "split the command", 4),
    ("unknown-var", "name: x\nvars:\n  dataset: d.jsonl\nphases:\n  - id: a\n    run: [cat, '${datset}']\n",
     "phases.a.run[1]", "did you mean 'dataset'", 6),
    ("var-cycle", "name: x\nvars:\n  a: ${b}\n  b: ${a}\nphases:\n  - id: a\n    run: [x]\n",
     "vars.", "cycle", None),
    ("needs-unknown", "name: x\nphases:\n  - id: a\n    run: [x]\n    needs: [mrege]\n",
     "phases.a.needs", "unknown phase 'mrege'", 5),
    ("needs-cycle", "name: x\nphases:\n  - id: a\n    run: [x]\n    needs: [b]\n  - id: b\n    run: [x]\n    needs: [a]\n",
     "needs", "cycle: a -> b -> a", None),
    ("needs-self", "name: x\nphases:\n  - id: a\n    run: [x]\n    needs: [a]\n", "phases.a.needs", "cannot need itself", 5),
    ("unknown-check-kind", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - exist: /tmp\n",
     "phases.a.checks[0].exist", "did you mean 'exists'", 6),
    ("two-kinds-one-check", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - exists: /tmp\n        absent: /x\n",
     "phases.a.checks[0]", "one check per entry", 6),
    ("bad-severity", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - exists: /tmp\n        severity: fatal\n",
     "phases.a.checks[0].severity", "not a severity", 7),
    ("free-space-missing-need", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - free_space: {path: /tmp}\n",
     "phases.a.checks[0].free_space", "need", 6),
    ("confirm-not-bool", "name: x\nphases:\n  - id: a\n    run: [x]\n    confirm: yes please\n",
     "phases.a.confirm", "true or false", 5),
    ("bad-kind", "name: x\nphases:\n  - id: a\n    run: [x]\n    kind: daemon\n", "phases.a.kind", "not a phase kind", 5),
    ("env-not-mapping", "name: x\nphases:\n  - id: a\n    run: [x]\n    env: [A=1]\n", "phases.a.env", "expected a mapping", 5),
    ("env-var-unset", "name: x\nphases:\n  - id: a\n    run: [x, '${env:EAGLE3_TEST_SURELY_UNSET}']\n",
     "phases.a.run[1]", "EAGLE3_TEST_SURELY_UNSET is not set", 4),
    ("duplicate-key", "name: x\nname: y\nphases:\n  - id: a\n    run: [x]\n", "name", "duplicate key", 2),
    ("ready-on-task", "name: x\nphases:\n  - id: a\n    run: [x]\n    ready:\n      - port_free: 1234\n",
     "phases.a.ready", "kind: service", 5),
    ("check-is-scalar", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - exists\n",
     "phases.a.checks[0]", "a check is a mapping", 6),
    ("duplicate-check-names", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - exists: /a\n        name: same\n      - exists: /b\n        name: same\n",
     "phases.a.checks[1]", "two checks are named 'same'", 8),
    ("vars-is-list", "name: x\nvars: [a, b]\nphases:\n  - id: a\n    run: [x]\n", "vars", "expected a mapping", 2),
    ("check-timeout-unbounded", "name: x\nphases:\n  - id: a\n    run: [x]\n    checks:\n      - command: {argv: ['true'], timeout: 1e9}\n",
     "phases.a.checks[0]", "timeout must be seconds in (0, 21600]", 6),
    ("check-timeout-zero", "name: x\nphases:\n  - id: a\n    run: [x]\n    verify:\n      - http_ok: {url: 'http://127.0.0.1:1/', timeout: 0}\n",
     "phases.a.verify[0]", "timeout must be seconds in (0, 21600]", 6),
    ("volumes-not-list", "name: x\nvolumes: /data\nphases:\n  - id: a\n    run: [x]\n", "volumes", "expected a list", 2),
    ("parallel-zero", "name: x\nparallel: 0\nphases:\n  - id: a\n    run: [x]\n", "parallel",
     "a whole number of phases from 1 to 64, got 0", 2),
    ("parallel-not-a-number", "name: x\nparallel: all\nphases:\n  - id: a\n    run: [x]\n", "parallel",
     "a whole number of phases from 1 to 64, got 'all'", 2),
    ("parallel-a-list", "name: x\nparallel: [2]\nphases:\n  - id: a\n    run: [x]\n", "parallel",
     "expected a single value", 2),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_config_mistake_exits_2_naming_key(case, tmp_path: Path, capsys) -> None:
    _, text, key, message, line = case
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(text)
    code = main(["status", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert str(cfg) in err
    assert key in err
    assert message in err
    if line is not None:
        assert f"{cfg}:{line}:" in err


def test_missing_config_file(tmp_path: Path, capsys) -> None:
    code = main(["check", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "config file not found" in err and "nope.yaml" in err


def test_set_unknown_variable(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("name: x\nvars:\n  dataset: a\nphases:" + GOOD_PHASE)
    code = main(["status", str(cfg), "--set", "datset=b"])
    err = capsys.readouterr().err
    assert code == 2 and "datset" in err and "did you mean 'dataset'" in err


def test_set_without_equals(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("name: x\nvars:\n  dataset: a\nphases:" + GOOD_PHASE)
    assert main(["status", str(cfg), "--set", "dataset"]) == 2
    assert "VAR=VALUE" in capsys.readouterr().err


def test_corpus_is_large_enough() -> None:
    assert len({c[0] for c in CASES}) >= 20
