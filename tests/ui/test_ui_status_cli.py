"""`eagle3 status` for scripts: the same snapshot the console shows (live progress of a
running phase in --json), exit codes that say whether anything needs a look, and --watch."""

from __future__ import annotations

import json
from pathlib import Path

from ui_harness import stop_all, write_config

from console.cli import main
from console.core.lifecycle.project import Project


def _wait(cond, what: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)  # wait-ok: polling a condition with a deadline
    raise AssertionError(f"timed out waiting for {what}")


def test_status_json_has_live_progress_and_exit_codes_say_what_needs_a_look(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg = write_config(tmp_path)
    project = Project.load(cfg)
    try:
        project.start("stream")

        def progress():  # type: ignore[no-untyped-def]
            capsys.readouterr()
            code = main(["status", str(cfg), "--json"])
            doc = json.loads(capsys.readouterr().out)
            p = {x["phase"]: x for x in doc["phases"]}["stream"]
            return (code, doc, p) if p["progress"] and p["progress"]["done"] == 3000 else None

        code, doc, p = _wait(progress, "stream progress in status --json")
        assert code == 0 and doc["exit_code"] == 0
        assert p["state"] == "running" and p["progress"]["total"] == 10000
        assert p["progress"]["rate_per_s"] == 100.0 and p["progress"]["eta_s"] == 70.0
        assert p["progress"]["metrics"] == {"loss": 1.5} and p["stalled"] is False
        assert main(["status", str(cfg)]) == 0
        assert "30.0%  3,000/10,000 samples  100 samples/s  ETA 1m10s  avg loss 1.98 (last 20)" in capsys.readouterr().out

        project.stop("stream", grace=2)
        capsys.readouterr()
        assert main(["status", str(cfg), "--json"]) == 0  # stopped is not a failure
        stopped = {x["phase"]: x for x in json.loads(capsys.readouterr().out)["phases"]}["stream"]
        assert stopped["progress"]["done"] == 3000 and stopped["progress"]["eta_s"] is None  # no ETA once stopped

        project.start("gated", overrides={"input-present": "test"})
        (tmp_path / "stream.py").write_text("import sys; sys.exit(4)")
        project.start("stream")
        _wait(lambda: project.status("stream").state == "failed", "stream failed")
        assert main(["status", str(cfg)]) == 1
        assert main(["status", str(cfg), "--watch", "0.1", "--count", "2"]) == 1
        out = capsys.readouterr().out
        assert out.count("(every 0.1s, Ctrl-C to leave)") == 2 and "✗ stream" in out
    finally:
        stop_all(project)
