"""The CLI as an operator scripts it: run --all, resume after a fix, overrides in the
journal, staleness after an input changes, check and status exit codes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from console.cli import main

CFG = textwrap.dedent("""\
    name: flow
    vars:
      work: ./work
    state_dir: ${work}/state
    volumes: [${work}]
    phases:
      - id: make-data
        title: Copy the input
        run: [python, -c, "import shutil; shutil.copy('work/input.txt', 'work/data.txt'); print('copied')"]
        checks:
          - exists: ${work}/input.txt
        verify:
          - exists: ${work}/data.txt
        inputs: [${work}/input.txt]
        outputs: [${work}/data.txt]
      - id: count
        title: Count lines
        needs: [make-data]
        run:
          - python
          - -c
          - |
            import os, sys
            if os.path.exists('work/broken'):
                print('input is broken'); sys.exit(3)
            n = len(open('work/data.txt').read().splitlines())
            open('work/count.txt', 'w').write(str(n)); print('counted', n)
        checks:
          - free_space: {path: "${work}", need: 1KB}
        verify:
          - contains: {path: "${work}/count.txt", pattern: "^[0-9]+$"}
        inputs: [${work}/data.txt]
        outputs: [${work}/count.txt]
      - id: guarded
        run: [python, -c, "print('guarded ran')"]
        checks:
          - exists: ${work}/approval.txt
            name: approval
      - id: wipe
        confirm: true
        run: [rm, -rf, "${work}/old"]
        deletes: ["${work}/old"]
      - id: sleeper
        run: [python, -c, "import time; print('sleeping', flush=True); time.sleep(60)"]  # wait-ok: the phase program's own work, not a test pause
      - id: ticker
        run: [python, -c, "import time\\nfor i in range(4): print('tick', i, flush=True); time.sleep(0.3)\\nprint('ticker finished')"]  # wait-ok: the phase program's own work, not a test pause
    """)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "input.txt").write_text("a\nb\nc\n")
    p = tmp_path / "flow.yaml"
    p.write_text(CFG)
    return p


def status(cfg: Path, capsys) -> dict[str, dict]:
    capsys.readouterr()
    code = main(["status", str(cfg), "--json"])
    phases = {p["phase"]: p for p in json.loads(capsys.readouterr().out)["phases"]}
    # exit 1 exactly when a phase is failed or stale (issue 10, item 8)
    assert code == (1 if any(p["state"] in ("failed", "stale") for p in phases.values()) else 0)
    return phases


def test_run_all_stops_at_failure_and_resumes_after_fix(cfg: Path, capsys) -> None:
    work = cfg.parent / "work"
    (work / "broken").write_text("x")
    code = main(["run", str(cfg), "--all"])
    cap = capsys.readouterr()
    assert code == 1
    assert "input is broken" in cap.out  # the log was streamed
    assert "stopped at count" in cap.err
    st = status(cfg, capsys)
    assert st["make-data"]["state"] == "done"
    assert st["count"]["state"] == "failed" and st["count"]["exit_code"] == 3

    (work / "broken").unlink()
    (work / "approval.txt").write_text("ok")
    s = CFG.split("  - id: wipe")[0]
    cfg.write_text(s)
    code = main(["run", str(cfg), "--all"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "make-data: done, skipped" in cap.out
    assert "counted 3" in cap.out
    st = status(cfg, capsys)
    assert [st[p]["state"] for p in ("make-data", "count", "guarded")] == ["done", "done", "done"]
    assert (work / "count.txt").read_text() == "3"


def test_input_change_marks_phase_and_downstream_stale(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "make-data", "--wait"]) == 0
    assert main(["run", str(cfg), "count", "--wait"]) == 0
    st = status(cfg, capsys)
    assert st["make-data"]["state"] == "done" and st["count"]["state"] == "done"
    (cfg.parent / "work" / "input.txt").write_text("a\nb\nc\nd\n")
    st = status(cfg, capsys)
    assert st["make-data"]["state"] == "stale"
    assert "input.txt" in st["make-data"]["reason"]
    assert st["count"]["state"] == "stale"
    assert "make-data" in st["count"]["reason"]


def test_blocked_run_then_override_recorded_in_journal(cfg: Path, capsys) -> None:
    code = main(["run", str(cfg), "guarded", "--wait"])
    cap = capsys.readouterr()
    assert code == 1
    assert "approval" in cap.err and "blocked" in cap.err

    code = main(["run", str(cfg), "guarded", "--wait", "--override", "approval",
                 "--reason", "approved on the phone by Dana"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "guarded ran" in cap.out
    assert main(["journal", str(cfg), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    overrides = [r for r in records if r["event"] == "override"]
    assert len(overrides) == 1
    assert overrides[0]["check"] == "approval"
    assert overrides[0]["reason"] == "approved on the phone by Dana"
    assert overrides[0]["user"]
    assert main(["journal", str(cfg)]) == 0
    assert "overridden: approved on the phone by Dana" in capsys.readouterr().out


def test_journal_and_logs_cannot_be_forged_or_carry_terminal_escapes(cfg: Path, capsys) -> None:
    forged = "ok\n2026-01-01 00:00:00  root       run_ended    make-data      run x exit 0\x1b]52;c;ZXZpbA==\x07"
    assert main(["run", str(cfg), "guarded", "--wait", "--override", "approval", "--reason", forged]) == 0
    capsys.readouterr()
    assert main(["journal", str(cfg), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert main(["journal", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert len(text.splitlines()) == len(records)
    assert "\x1b" not in text and "\x07" not in text
    assert "overridden: ok\\n2026-01-01" in text  # the newline is shown, not obeyed

    from console.core.runs import manager
    rd = manager.latest_run(cfg.parent / "work" / "state", "guarded")
    with open(rd.output_log, "ab") as f:
        f.write(b"\x1b[2J\x1b]0;pwned\x07\x9b31mred\x1b[0m plain\n")
    assert main(["logs", str(cfg), "guarded"]) == 0
    log = capsys.readouterr().out
    assert "guarded ran" in log and "red plain" in log
    assert not any(c in log for c in "\x1b\x07\x9b")


def test_override_needs_reason_and_a_real_check_name(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "guarded", "--override", "approval"]) == 2
    assert "--reason" in capsys.readouterr().err
    assert main(["run", str(cfg), "guarded", "--override", "aproval", "--reason", "x"]) == 1
    assert "no check named 'aproval'" in capsys.readouterr().err


def test_check_exit_codes_and_json(cfg: Path, capsys) -> None:
    assert main(["check", str(cfg), "make-data"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "all 2 checks in 1 phase pass"
    assert main(["check", str(cfg), "guarded", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    res = {r["name"]: r for r in data["phases"]["guarded"]}
    assert res["approval"]["status"] == "fail"
    assert "approval.txt" in res["approval"]["message"] or "approval.txt" in json.dumps(res["approval"]["evidence"])
    # needs not done: count is blocked by its needs until make-data is done
    assert main(["check", str(cfg), "count"]) == 1
    assert "make-data" in capsys.readouterr().out


def test_logs_and_unknown_phase(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "make-data", "--wait"]) == 0
    capsys.readouterr()
    assert main(["logs", str(cfg), "make-data"]) == 0
    assert "copied" in capsys.readouterr().out
    for argv in (["logs", str(cfg), "nope"], ["stop", str(cfg), "nope"], ["journal", str(cfg), "--phase", "nope"],
                 ["run", str(cfg), "nope"], ["check", str(cfg), "nope"]):
        assert main(argv) == 2, argv  # a usage error, like any other
        assert "no phase 'nope'" in capsys.readouterr().err


def test_confirm_phase_shows_what_it_deletes_and_needs_the_id(cfg: Path, capsys) -> None:
    old = cfg.parent / "work" / "old"
    old.mkdir()
    (old / "a.bin").write_bytes(b"x" * 5000)
    code = main(["run", str(cfg), "wipe", "--wait"])
    err = capsys.readouterr().err
    assert code == 1
    assert "deletes:" in err and str(old) in err and "1 files" in err and "5.0 kB" in err.replace("KB", "kB")
    assert "--confirm wipe" in err
    assert old.exists()
    assert main(["run", str(cfg), "wipe", "--wait", "--confirm", "wipe"]) == 0
    assert not old.exists()
    capsys.readouterr()
    main(["journal", str(cfg), "--json"])
    events = [r["event"] for r in json.loads(capsys.readouterr().out)]
    assert "confirm" in events


def test_stop_a_running_phase(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "sleeper"]) == 0
    st = status(cfg, capsys)
    assert st["sleeper"]["state"] == "running"
    assert main(["run", str(cfg), "sleeper"]) == 1
    assert "already running" in capsys.readouterr().err
    assert main(["stop", str(cfg), "sleeper", "--grace", "2"]) == 0
    st = status(cfg, capsys)
    assert st["sleeper"]["state"] == "stopped"
    assert main(["stop", str(cfg), "sleeper"]) == 1
    assert "not running" in capsys.readouterr().err


def test_changed_command_marks_phase_stale(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "make-data", "--wait"]) == 0
    assert status(cfg, capsys)["make-data"]["state"] == "done"
    cfg.write_text(CFG.replace("print('copied')", "print('copied again')"))
    st = status(cfg, capsys)
    assert st["make-data"]["state"] == "stale"
    assert "command changed" in st["make-data"]["reason"]


def test_logs_follow_streams_until_the_phase_ends(cfg: Path, capsys) -> None:
    assert main(["run", str(cfg), "ticker"]) == 0
    capsys.readouterr()
    assert main(["logs", str(cfg), "ticker", "-f"]) == 0
    out = capsys.readouterr().out
    assert "tick 0" in out and "tick 3" in out and "ticker finished" in out
    assert status(cfg, capsys)["ticker"]["state"] == "done"


def test_unwritable_state_dir_is_one_clear_line(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("not a folder")
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"name: x\nstate_dir: {blocker}/sub\nphases:\n  - id: a\n    run: [python, -c, 'pass']\n")
    code = main(["run", str(cfg), "a"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err and "internal error" not in err
    assert "state-is-a-file" in err


BIDI = "\u202e\u2066\u2067\u2068\u2069\u202a\u202b\u202c\u202d\u200b\u2060\ufeff\U000e0041"


def test_bidi_overrides_never_reach_titles_the_journal_or_logs(cfg: Path, capsys) -> None:
    """A title, an override reason or a log line holding U+202E (right-to-left override) and
    the isolates would show the operator text in another order than it was written, and keep
    the rest of a truncated row reversed. They are dropped; ZWJ/ZWNJ stay."""
    from console.core.config.loader import load_config
    from console.ui.logfeed import clean_lines

    cfg.write_text(cfg.read_text().replace("title: Copy the input", f"title: Copy {BIDI}the input")
                   .replace("name: flow", f"name: fl{BIDI}ow").replace("name: approval", f"name: appr{BIDI}oval"))
    config = load_config(cfg)
    assert (config.name, config.phase("make-data").title) == ("flow", "Copy the input")
    assert [c.name for c in config.phase("guarded").checks] == ["approval"]
    reason = f"safe{BIDI}: approved by ops"
    assert main(["run", str(cfg), "guarded", "--wait", "--override", "approval", "--reason", reason]) == 0
    capsys.readouterr()
    assert main(["journal", str(cfg)]) == 0
    journal = capsys.readouterr().out
    assert "overridden: safe: approved by ops" in journal

    from console.core.runs import manager
    rd = manager.latest_run(cfg.parent / "work" / "state", "guarded")
    with open(rd.output_log, "ab") as f:
        f.write(f"evil{BIDI}line \u0915\u094d\u200d\u0937\n".encode())
    assert main(["logs", str(cfg), "guarded"]) == 0
    log = capsys.readouterr().out
    assert "evilline \u0915\u094d\u200d\u0937" in log  # the ZWJ of a conjunct is kept
    assert clean_lines([f"a{BIDI}b", "plain"]) == ["ab", "plain"]
    for text in (journal, log):
        assert not any(c in text for c in BIDI)


class _Terminal:
    """stdin as a terminal the operator types `answer` into."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        return self.answer + "\n"


def test_running_a_done_phase_again_asks_on_a_terminal_and_needs_rerun_in_a_script(
        cfg: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """As the console asks before `r` on a done phase, so does `eagle3 run`; --all still
    skips what is done."""
    from console.core.runs import manager

    state = cfg.parent / "work" / "state"
    assert main(["run", str(cfg), "make-data", "--wait"]) == 0
    runs = len(manager.list_runs(state, "make-data"))
    capsys.readouterr()
    assert main(["run", str(cfg), "make-data", "--wait"]) == 2  # no terminal: a script must say --rerun
    err = capsys.readouterr().err
    assert "make-data is done" in err and "(count) become stale" in err and "--rerun" in err
    assert len(manager.list_runs(state, "make-data")) == runs
    monkeypatch.setattr("sys.stdin", _Terminal("n"))
    assert main(["run", str(cfg), "make-data", "--wait"]) == 1
    assert "Run it again? [y/N]" in capsys.readouterr().out
    assert len(manager.list_runs(state, "make-data")) == runs
    monkeypatch.setattr("sys.stdin", _Terminal("y"))
    assert main(["run", str(cfg), "make-data", "--wait"]) == 0
    assert len(manager.list_runs(state, "make-data")) == runs + 1
    monkeypatch.undo()
    assert main(["run", str(cfg), "make-data", "--wait", "--rerun"]) == 0
    assert len(manager.list_runs(state, "make-data")) == runs + 2
    cfg.write_text(CFG.split("  - id: count")[0])
    capsys.readouterr()
    assert main(["run", str(cfg), "--all"]) == 0
    assert "make-data: done, skipped" in capsys.readouterr().out


def test_a_mistyped_phase_id_gets_did_you_mean_on_every_command(cfg: Path, capsys) -> None:
    for argv in (["logs", str(cfg), "make-dta"], ["stop", str(cfg), "make-dta"], ["run", str(cfg), "make-dta"],
                 ["journal", str(cfg), "--phase", "make-dta"], ["check", str(cfg), "make-dta"]):
        assert main(argv) == 2, argv
        assert "no phase 'make-dta'; did you mean 'make-data'?" in capsys.readouterr().err, argv


def test_every_command_line_error_starts_with_eagle3(cfg: Path, capsys) -> None:
    for argv in (["status", str(cfg), "--set", "work"], ["run", str(cfg)], ["run", str(cfg), "guarded", "--override", "x"],
                 ["status", str(cfg), "--watch", "0"], ["console", str(cfg), "--serve", "http"],
                 ["console", str(cfg), "--serve-actions"], ["run"], ["nosuch", str(cfg)],
                 ["run", str(cfg), "--all", "--override", "nope", "--reason", "r"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("eagle3: ") and err.count("\n") == 1, (argv, err)
