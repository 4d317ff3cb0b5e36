"""A value is data, never code. A `${var}` placed inside the script a shell runs with `-c` (or
the code of `python -c`) is refused when the config loads, naming the file, line and key and
the way to pass the value instead; a `run:` string is split before its values are substituted,
so a value with spaces, quotes or `;` is one argument. The attack this closes: a config that ran
`sh -c "... ${x} ..."` ran a saved value `/x; touch PWNED`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from console.cli import main
from console.core.config.loader import load_config
from console.core.text.errors import ConfigError

HOSTILE = "/x; touch PWNED"


def _config(tmp_path: Path, phase_lines: str, extra: str = "") -> Path:
    cfg = tmp_path / "shell.yaml"
    cfg.write_text(textwrap.dedent("""\
        name: shell
        vars:
          x: ./out.txt
        state_dir: ./state
        """) + extra + "phases:\n  - id: a\n" + textwrap.indent(textwrap.dedent(phase_lines), "    "))
    return cfg


def test_a_saved_value_with_shell_code_never_runs_through_a_shell_script(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, """\
        run: [sh, -c, "echo hello > ${x}"]
        """)
    code = main(["run", str(cfg), "a", "--wait", "--set", f"x={HOSTILE}"])
    err = capsys.readouterr().err
    assert not (tmp_path / "PWNED").exists()
    assert code == 2, err
    assert f"{cfg}:7: phases.a.run[2]: ${{x}} is placed inside the code that `sh -c` runs" in err, err
    assert """[sh, -c, 'echo "$1"', sh, "${x}"]""" in err and 'X: "${x}"' in err


@pytest.mark.parametrize(("run", "key", "program"), [
    ('"bash -lc \'cp ${x} /tmp/y\'"', "phases.a.run", "bash"),
    ('[/bin/bash, -euo, pipefail, -c, "ls ${x}"]', "phases.a.run[4]", "bash"),
    ('[env, A=1, dash, -e, -c, "cat ${x}"]', "phases.a.run[5]", "dash"),
    ('[zsh, -c, "print ${env:HOME}"]', "phases.a.run[2]", "zsh"),
    ('[python, -c, "open(\'${x}\').read()"]', "phases.a.run[2]", "python"),
    ('[python3, -u, -c, "print(\'${x}\')"]', "phases.a.run[3]", "python3"),
    ('[python3, -Xdev, -W, ignore, -c, "print(\'${x}\')"]', "phases.a.run[5]", "python3"),
    ('[bash, --rcfile, rc.sh, -c, "ls ${x}"]', "phases.a.run[4]", "bash"),
])
def test_a_value_inside_a_shell_or_python_script_is_refused_naming_key_and_line(
        run: str, key: str, program: str, tmp_path: Path) -> None:
    cfg = _config(tmp_path, f"run: {run}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert e.value.line == 7 and e.value.key == key, str(e.value)
    assert f"`{program} -c` runs" in e.value.message


@pytest.mark.parametrize(("where", "text", "key", "line"), [
    ("notify", "notify:\n  - run: [sh, -c, \"notify-send ${x}\"]\n", "notify[0].run[2]", 6),
    ("command check", None, "phases.a.checks[0].command[2]", 9),
    ("command check argv", None, "phases.a.checks[0].command.argv", 9),
    ("values command", None, "phases.a.checks[0].free_space.values.n.command[2]", 12),
])
def test_every_command_of_a_config_is_held_to_the_same_rule(where: str, text: str | None, key: str, line: int,
                                                           tmp_path: Path) -> None:
    checks = {
        "command check": """\
            run: [true]
            checks:
              - command: [sh, -c, "test -s ${x}"]
            """,
        "command check argv": """\
            run: [true]
            checks:
              - command: {argv: "bash -c 'test -s ${x}'", expect: 0}
            """,
        "values command": """\
            run: [true]
            checks:
              - free_space:
                  path: .
                  need: n.bytes
                  values: {n: {command: [sh, -c, "du -sb ${x}"]}}
            """,
    }
    cfg = _config(tmp_path, checks.get(where, "run: [true]\n"), text or "")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert e.value.key == key and e.value.line == line, str(e.value)
    assert "-c` runs" in e.value.message


def test_a_value_passed_as_an_argument_or_through_env_runs_as_the_literal_value(tmp_path: Path, capsys) -> None:
    cfg = _config(tmp_path, """\
        run: [sh, -c, 'printf "%s|%s|$${HOME:+home}" "$1" "$V" > written.txt', sh, "${x}"]
        env: {V: "${x}"}
        """)
    assert main(["run", str(cfg), "a", "--wait", "--set", f"x={HOSTILE}"]) == 0, capsys.readouterr().err
    assert (tmp_path / "written.txt").read_text() == f"{HOSTILE}|{HOSTILE}|home"
    assert not (tmp_path / "PWNED").exists()


def test_a_run_string_keeps_each_value_one_argument_whatever_it_holds(tmp_path: Path) -> None:
    cfg = _config(tmp_path, """\
        run: "python -m pipeline.merge --out ${x} --name=${x} '${x}' ${env:EAGLE3_SURELY_UNSET:-a b}"
        """)
    value = "a b; 'c \"d"
    argv = load_config(cfg, overrides={"x": value}).phase("a").argv
    assert list(argv) == ["python", "-m", "pipeline.merge", "--out", value, f"--name={value}", value, "a b"]


def test_the_shipped_configs_still_load() -> None:
    root = Path(__file__).resolve().parents[2] / "configs"
    for cfg in sorted(root.rglob("*.yaml")):
        load_config(cfg, saved={})
