"""pipeline.serve: the SGLang command it builds (checked against the real 0.5.23 flags), what it
refuses, and, with a stand-in in place of sglang.launch_server, that the server it execs is
the phase's process, becomes ready and dies with the phase's stop."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_wheel import sglang_source  # noqa: F401  (the fixture)

from pipeline.serve.__main__ import main
from pipeline.serve.command import CHECKOUT

STANDIN = Path(__file__).resolve().parent / "standin_sglang.py"


@pytest.fixture
def model(tmp_path) -> Path:
    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"hidden_size": 16, "num_hidden_layers": 8, "vocab_size": 64}))
    return d


def dry(capsys, *argv: str) -> tuple[dict[str, str], list[str], str]:
    """(environment additions, argv, the unset line if any) printed by --dry-run."""
    assert main(["--dry-run", *argv]) == 0  # first: after `--` it would be SGLang's, and serve would exec
    lines = capsys.readouterr().out.strip().splitlines()
    unset = lines[0] if lines[0].startswith("unset ") else ""
    words = shlex.split(lines[-1])
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words, unset


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_extract_mode_turns_on_the_dump_and_what_it_needs(capsys, model, tmp_path):
    env, argv, _ = dry(capsys, "--mode", "extract", "--model", str(model), "--tp", "8", "--mem-fraction", "0.85",
                       "--dump-dir", str(tmp_path / "hs"), "--dump-budget", "1MB", "--port", "30001",
                       "--", "--trust-remote-code")
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert flag(argv, "--model-path") == str(model) and flag(argv, "--tp-size") == "8"
    assert flag(argv, "--host") == "127.0.0.1" and flag(argv, "--port") == "30001"
    assert flag(argv, "--mem-fraction-static") == "0.85"
    assert "--disable-radix-cache" in argv and flag(argv, "--chunked-prefill-size") == "-1"
    assert flag(argv, "--cuda-graph-backend-prefill") == "disabled"
    assert argv[-1] == "--trust-remote-code"
    assert env["EAGLE3_DUMP_DIR"] == str(tmp_path / "hs") and env["EAGLE3_DUMP_BUDGET"] == "1000000"
    assert str(CHECKOUT) in env["PYTHONPATH"].split(os.pathsep)
    assert not any(a.startswith("--speculative") for a in argv)


def test_normal_mode_serves_the_target_alone_for_regeneration(capsys, model, monkeypatch):
    monkeypatch.setenv("EAGLE3_DUMP_DIR", "/dev/shm/left-from-extraction")
    env, argv, unset = dry(capsys, "--mode", "normal", "--model", str(model), "--tp", "8", "--port", "30002")
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert flag(argv, "--model-path") == str(model) and flag(argv, "--tp-size") == "8"
    assert "EAGLE3_DUMP_DIR" not in env and unset == "unset EAGLE3_DUMP_DIR"
    assert not any(a.startswith("--speculative") or a == "--disable-radix-cache" for a in argv)


def test_eagle3_mode_serves_the_drafter_and_never_dumps(capsys, model, tmp_path, monkeypatch):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    monkeypatch.setenv("EAGLE3_DUMP_DIR", "/dev/shm/left-from-extraction")
    env, argv, unset = dry(capsys, "--mode", "eagle3", "--model", str(model), "--draft", str(draft),
                           "--num-steps", "5", "--topk", "1", "--num-draft-tokens", "6")
    assert flag(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag(argv, "--speculative-draft-model-path") == str(draft)
    assert flag(argv, "--speculative-num-steps") == "5" and flag(argv, "--speculative-eagle-topk") == "1"
    assert flag(argv, "--speculative-num-draft-tokens") == "6"
    assert "EAGLE3_DUMP_DIR" not in env and unset == "unset EAGLE3_DUMP_DIR"
    assert "--disable-radix-cache" not in argv


@pytest.mark.parametrize("args, says", [
    (["--mode", "extract", "--model", "{tmp}/nope", "--dump-dir", "{tmp}/hs"], "no such folder"),
    (["--mode", "extract", "--model", "{model}"], "needs --dump-dir"),
    (["--mode", "extract", "--model", "{model}", "--dump-dir", "{tmp}/hs", "--dump-budget", "900PB"],
     "more than"),
    (["--mode", "extract", "--model", "{model}", "--dump-dir", "{tmp}/hs", "--dump-budget", "lots"], "--dump-budget"),
    (["--mode", "eagle3", "--model", "{model}"], "needs --draft"),
    (["--mode", "normal", "--model", "{model}", "--dump-dir", "{tmp}/hs"], "serves the target alone"),
    (["--mode", "extract", "--model", "{model}", "--dump-dir", "{tmp}/hs", "--tp", "0"], "--tp must be"),
    (["--mode", "extract", "--model", "{model}", "--dump-dir", "{tmp}/hs", "--", "--port", "1"],
     "--port after -- is set by"),
    (["--mode", "extract", "--model", "{model}", "--dump-dir", "{tmp}/hs", "--", "--chunked-prefill-size=4096"],
     "--chunked-prefill-size after --"),
])
def test_bad_input_is_refused_with_one_line(capsys, model, tmp_path, args, says):
    argv = [a.format(tmp=tmp_path, model=model) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve: ") and says in err and err.count("\n") == 1


def test_every_flag_it_passes_exists_in_sglang_0_5_23(capsys, model, tmp_path, sglang_source):  # noqa: F811
    srt = sglang_source / "sglang" / "srt"
    texts = [(srt / "server_args.py").read_text()] + [p.read_text() for p in (srt / "arg_groups" / "fields").glob("*.py")]
    known = set()
    for text in texts:
        known |= {"--" + m.replace("_", "-") for m in re.findall(r"^    ([a-z_0-9]+): A\[", text, re.MULTILINE)}
        known |= set(re.findall(r'"(--[a-z0-9-]+)"', text))
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    _, extract, _ = dry(capsys, "--mode", "extract", "--model", str(model), "--dump-dir", str(tmp_path / "hs"),
                        "--dump-budget", "1MB", "--mem-fraction", "0.8")
    _, eagle3, _ = dry(capsys, "--mode", "eagle3", "--model", str(model), "--draft", str(draft))
    used = {a for a in extract[3:] + eagle3[3:] if a.startswith("--")}
    assert used - known == set(), "flags SGLang 0.5.23 does not register"
    assert '"disabled"' in (srt / "arg_groups" / "fields" / "exec_.py").read_text() or \
        "disabled" in (srt / "model_executor" / "cuda_graph_config.py").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_server_is_the_phase_process_and_stops_with_the_phase(tmp_path, model):
    from console.core.model.config import CheckSpec, Config, Phase
    from console.core.runs.manager import latest_run, readiness, start_run, stop_run
    from console.core.runs.procs import alive

    fake = tmp_path / "fake-sglang"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(
        f"import runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n")
    port = _free_port()
    ph = Phase(id="serve-extract", title="Serve", kind="service",
               argv=("python", "-m", "pipeline.serve", "--mode", "extract", "--model", str(model), "--port", str(port),
                     "--dump-dir", str(tmp_path / "hs"), "--dump-budget", "1MB"),
               env={"PYTHONPATH": str(fake)},
               ready=(CheckSpec(kind="http_ok", arg=f"http://127.0.0.1:{port}/health", name="health"),))
    cfg = Config(path=tmp_path / "p.yaml", name="t", vars={}, state_dir=tmp_path / "state", volumes=(),
                 phases=(ph,), fingerprint="fp", overrides={})
    start_run(cfg, ph)
    try:
        deadline = time.monotonic() + 30
        ok, results = readiness(cfg, ph)
        while not ok and time.monotonic() < deadline:
            time.sleep(0.05)  # wait-ok: poll interval of a deadline loop
            ok, results = readiness(cfg, ph)
        assert ok, results
        pid = latest_run(cfg.state_dir, ph.id).read_pid()
        cmdline = Path(f"/proc/{pid.child_pid}/cmdline").read_bytes().split(b"\0")
        assert b"sglang.launch_server" in cmdline, "serve exec'd the server: the phase's process is the server"
        assert (tmp_path / "hs").is_dir()
    finally:
        assert stop_run(cfg, ph.id, grace=5.0)
    assert not alive(pid.child_pid, pid.child_start_time), "the server died with the phase"
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "nothing listens after the stop"


def test_the_model_path_reaches_sglang_as_written(capsys, model, tmp_path):
    """SGLang's /model_info reports --model-path verbatim; readiness compares it with the config's."""
    _, argv, _ = dry(capsys, "--mode", "extract", "--model", f"{model}/", "--dump-dir", str(tmp_path / "hs"),
                     "--dump-budget", "1MB")
    assert flag(argv, "--model-path") == f"{model}/"
