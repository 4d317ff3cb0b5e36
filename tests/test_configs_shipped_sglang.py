"""The SGLang-path configs we ship (configs/kimi-k25-8gpu.yaml, configs/examples/*.yaml): on a
machine without their paths, GPUs or SGLang, `eagle3 check` names every failing check with its
reason and exits 1 (a config error would be 2); and the production config's serve and stop
phases really start a server and stop it (a stand-in in place of sglang.launch_server)."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

from console.cli import main
from console.core.config.loader import load_config

REPO = Path(__file__).resolve().parent.parent
KIMI = REPO / "configs" / "kimi-k25-8gpu.yaml"
EXAMPLES = sorted((REPO / "configs" / "examples").glob("*.yaml"))
STANDIN = REPO / "tests" / "pipeline" / "standin_sglang.py"


def _check_json(path: Path, capsys, *sets: str) -> tuple[int, dict, str]:
    code = main(["check", str(path), "--json", *sets])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def _results(report: dict) -> dict[tuple[str, str], dict]:
    return {(phase, r["name"]): r for phase, rs in report["phases"].items() for r in rs}


def test_kimi_check_here_names_every_failing_check_and_exits_1(tmp_path, capsys):
    code, report, err = _check_json(KIMI, capsys, "--set", f"data={tmp_path}",
                                    "--set", f"sglang_python={tmp_path}/no-env/bin/python")
    assert code == 1 and "Traceback" not in err
    results = _results(report)
    failing = [r for r in results.values() if r["status"] == "fail"]
    assert failing and all(r["message"].strip() for r in failing)
    why = {k: r["message"] for k, r in results.items() if r["status"] == "fail"}
    assert "no-env/bin/python" in why[("serve-extract", "interpreter")]
    assert ("serve-extract", "patch-applied") in why and ("extract", "patch-applied") in why
    assert ("serve-extract", "sglang-torch-sees-8-gpus") in why
    assert "merge" in why[("extract", "dataset-is-what-merge-wrote")]
    assert "connection refused" in why[("extract", "server-serves-target")]
    assert ("extract", "room-for-hidden-states") in why
    names = {name for _, name in results}
    assert {"gpus-idle", "shm-room-for-dump-budget", "old-hidden-states-gone", "port_free:30000"} <= names


def test_kimi_merge_takes_b1_to_b8_and_a2_not_a1_at_8192():
    cfg = load_config(KIMI)
    merge = cfg.phase("merge")
    argv = list(merge.argv)
    include = argv[argv.index("--include") + 1: argv.index("--exclude")]
    assert include == ["B_kimik25", "A2_kimik25"]  # B1..B8 as regenerate answered them with Kimi
    assert argv[argv.index("--exclude") + 1] == "A1_deepswekimi"
    assert argv[argv.index("--max-len") + 1] == "8192"
    assert argv[argv.index("--out") + 1] == "/data/eagle3/synth_100k/merged/train.jsonl"
    assert cfg.phase("clean-old").confirm and cfg.phase("clean-old").deletes
    assert [p.id for p in cfg.phases] == ["serve-target", "regenerate", "stop-target", "merge", "clean-old", "patch", "serve-extract", "extract",
                                          "stop-serve", "revert-patch", "train", "export", "serve-eagle3",
                                          "evaluate"]
    assert cfg.shm_dump == Path("/dev/shm/sglang_hs")


def test_kimi_runs_our_stages_with_arguments_they_accept():
    from pipeline.extract.options import build_parser as extract_parser
    from pipeline.merge.options import build_parser as merge_parser

    cfg = load_config(KIMI)
    merge_args = merge_parser().parse_args(list(cfg.phase("merge").argv[3:]))
    assert merge_args.include and merge_args.exclude == ["A1_deepswekimi"]
    assert merge_args.sources == ["/data/eagle3/raw", "/data/eagle3/synth_100k/regenerated/B_kimik25.jsonl"]
    extract_args = extract_parser().parse_args(list(cfg.phase("extract").argv[3:]))
    assert extract_args.backend == "sglang" and extract_args.server == "http://127.0.0.1:30000"
    assert str(extract_args.dump_dir) == "/dev/shm/sglang_hs" and extract_args.dump_budget == "32GB"


def test_kimi_regenerates_b1_to_b8_through_a_normal_mode_server_then_stops_it():
    from pipeline.regenerate.options import parse
    from pipeline.serve.options import build_parser as serve_parser

    cfg = load_config(KIMI)
    argv = list(cfg.phase("serve-target").argv)
    serve = serve_parser().parse_args(argv[3:argv.index("--")])
    assert serve.mode == "normal" and serve.tp == 8 and cfg.phase("serve-target").kind == "service"
    regen = parse(list(cfg.phase("regenerate").argv[3:]))
    assert regen.backend == "server" and regen.servers == ("http://127.0.0.1:30000",)
    assert regen.served_model == "/models/Kimi-K2.5" and [s.name for s in regen.sources] == [f"B{i}.jsonl" for i in range(1, 9)]
    assert list(cfg.phase("regenerate").needs) == ["serve-target"]
    assert "serve-target" in cfg.phase("stop-target").argv and "stop-target" in cfg.phase("merge").needs
    assert "stop-target" in cfg.phase("serve-extract").needs
    names = {c.name for c in cfg.phase("regenerate").checks}
    assert {"server-healthy", "server-serves-target", "room-for-regenerated-records"} <= names


def test_real_target_check_without_the_model_names_every_failing_check_and_exits_1(tmp_path, capsys):
    path = REPO / "configs" / "examples" / "real-target.yaml"
    code, report, err = _check_json(path, capsys, "--set", "target=/nonexistent", "--set", f"data={tmp_path}")
    assert code == 1 and "Traceback" not in err
    why = {k: r["message"] for k, r in _results(report).items() if r["status"] == "fail"}
    assert "/nonexistent/config.json does not exist" in why[("regenerate", "target-present")]
    assert "/nonexistent: no such folder" in why[("regenerate", "target-has-chat-template")]
    assert "raw/train.jsonl does not exist" in why[("regenerate", "chats-present")]
    assert ("regenerate", "room-for-regenerated-records") in why
    assert "regenerate" in why[("merge", "chats-are-what-regenerate-wrote")]
    assert ("extract", "room-for-hidden-states") in why and ("evaluate", "heldout-chats-present") in why
    assert all(m.strip() for m in why.values())


def test_real_target_stages_accept_their_arguments_and_extract_verify_follows_the_limit():
    from pipeline.evaluate.options import build_parser as evaluate_parser
    from pipeline.extract.options import build_parser as extract_parser
    from pipeline.regenerate.options import parse
    from pipeline.train.options import build_parser as train_parser

    cfg = load_config(REPO / "configs" / "examples" / "real-target.yaml", {"target": "/m/SmolLM2"})
    regen = parse(list(cfg.phase("regenerate").argv[3:]))
    assert regen.backend == "hf" and regen.limit == 8 and regen.max_prompt_tokens == 512
    extract = extract_parser().parse_args(list(cfg.phase("extract").argv[3:]))
    assert extract.limit == 8
    verify = next(c for c in cfg.phase("extract").verify if c.name == "every-sample-extracted")
    assert "min(stats.records, 8)" in str(verify.arg)
    train = train_parser().parse_args(list(cfg.phase("train").argv[3:]))
    assert train.resume and train.steps == 40 and train.batch_tokens == 2048
    evaluate = evaluate_parser().parse_args(list(cfg.phase("evaluate").argv[3:]))
    assert evaluate.prompts.name == "heldout-sharegpt.jsonl" and evaluate.limit == 8  # a variable: eval_prompts
    sized = load_config(REPO / "configs" / "examples" / "real-target.yaml", {"target": "/m/SmolLM2", "eval_prompts": "64"})
    assert evaluate_parser().parse_args(list(sized.phase("evaluate").argv[3:])).limit == 64


def test_kimi_trains_on_8_gpus_exports_and_measures_the_eagle3_server():
    from pipeline.evaluate.options import build_parser as evaluate_parser
    from pipeline.export.options import build_parser as export_parser
    from pipeline.serve.options import build_parser as serve_parser
    from pipeline.train.options import build_parser as train_parser

    cfg = load_config(KIMI)
    argv = list(cfg.phase("train").argv)
    assert argv[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert argv[argv.index("--nproc-per-node") + 1] == "8"
    train = train_parser().parse_args(argv[argv.index("pipeline.train") + 1:])
    assert str(train.store) == "/data/eagle3/synth_100k/hidden_states" and train.resume
    export = export_parser().parse_args(list(cfg.phase("export").argv[3:]))
    assert str(export.checkpoint) == str(train.out)
    serve = serve_parser().parse_args(list(cfg.phase("serve-eagle3").argv[3:cfg.phase("serve-eagle3").argv.index("--")]))
    assert serve.mode == "eagle3" and str(serve.draft) == str(export.out) and serve.tp == 8
    assert cfg.phase("serve-eagle3").kind == "service" and "revert-patch" in cfg.phase("serve-eagle3").needs
    evaluate = evaluate_parser().parse_args(list(cfg.phase("evaluate").argv[3:]))
    assert evaluate.server == "http://127.0.0.1:30000"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_config_loads_and_check_exits_1_with_reasons(path, tmp_path, capsys):
    cfg = load_config(path)
    assert cfg.phases
    sets = ["--set", f"data={tmp_path}"] if "data" in cfg.vars else []
    code, report, err = _check_json(path, capsys, *sets)
    assert code == 1 and "Traceback" not in err
    failing = [r for r in _results(report).values() if r["status"] == "fail"]
    assert failing and all(r["message"].strip() for r in failing)
    assert main(["status", str(path), "--json", *sets]) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_kimi_serve_phase_runs_the_server_and_stop_serve_stops_it(tmp_path, monkeypatch):
    from console.core.runs.manager import latest_run, readiness, run_status, start_run
    from console.core.runs.procs import alive

    fake = tmp_path / "fake-sglang"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(
        f"import runpy\nrunpy.run_path({str(STANDIN)!r}, run_name='__main__')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))  # the launcher passes its environment on
    target = tmp_path / "Kimi-K2.5"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 16, "num_hidden_layers": 8}))
    port = _free_port()
    cfg = load_config(KIMI, {"data": str(tmp_path), "target": str(target), "sglang_python": sys.executable,
                             "port": str(port), "dump_dir": str(tmp_path / "shm" / "hs"), "dump_budget_gb": "0.01"})
    serve = cfg.phase("serve-extract")
    start_run(cfg, serve)
    try:
        deadline = time.monotonic() + 30
        ok, results = readiness(cfg, serve)
        while not ok and time.monotonic() < deadline:
            time.sleep(0.05)  # wait-ok: poll interval of a deadline loop
            ok, results = readiness(cfg, serve)
        assert ok, [r.message for r in results]  # healthy, and /model_info names the target
        server = latest_run(cfg.state_dir, serve.id).read_pid()

        stop = start_run(cfg, cfg.phase("stop-serve"))
        deadline = time.monotonic() + 60
        while run_status(stop).state in ("running", "verifying") and time.monotonic() < deadline:
            time.sleep(0.05)  # wait-ok: poll interval of a deadline loop
        assert run_status(stop).state == "succeeded", stop.output_log.read_text()
    finally:
        from console.core.runs.manager import stop_run

        stop_run(cfg, serve.id, grace=2.0)
    assert run_status(latest_run(cfg.state_dir, serve.id)).state == "stopped"
    assert not alive(server.child_pid, server.child_start_time)
